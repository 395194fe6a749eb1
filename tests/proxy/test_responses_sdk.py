"""The Responses route, driven by the official openai SDK against the ASGI app in process."""

from __future__ import annotations

import json

import openai
import pytest
from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply, tool_call
from sessions.models import Message, Session, UsageReport
from sessions.status import session_mark_final
from tests.proxy import responses_fixtures
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY
from tests.proxy.responses_fixtures import asgi_responses

fake_responses = responses_fixtures.fake_responses

pytestmark = PROXY_DB

MODEL = "gpt-5.1-codex"
TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        "strict": False,
    },
    {"type": "web_search"},
]


def roles(sid: str) -> list[str]:
    session = Session.objects.get(external_id=sid)
    return list(
        Message.objects.filter(session=session).order_by("seq").values_list("role", flat=True)
    )


def test_non_streaming_tool_loop_returns_reasoning_verbatim(fake_responses, alice_key):
    fake = fake_responses
    fake.script(
        ScriptedReply(
            thinking="list files", tool_calls=[tool_call("exec_command", {"cmd": "ls"}, id="c1")]
        ),
        ScriptedReply(text="Two files."),
    )

    async def loop():
        client = asgi_responses(alice_key[1], session="ses_rs1")
        items = [
            {"role": "developer", "content": "You are terse."},
            {"role": "user", "content": "what is here?"},
        ]
        raw = await client.responses.with_raw_response.create(
            model=MODEL, input=items, tools=TOOLS, instructions="Base prompt.",
            reasoning={"summary": "auto"}, store=False, prompt_cache_key="pck-1",
            max_output_tokens=3000,
        )  # fmt: skip
        first = raw.parse()
        items += [item.model_dump(exclude_none=True) for item in first.output]
        items.append({"type": "function_call_output", "call_id": "c1", "output": "a.py\nb.py"})
        second = await client.responses.create(
            model=MODEL, input=items, tools=TOOLS, instructions="Base prompt.",
            reasoning={"summary": "auto"}, store=False, prompt_cache_key="pck-1",
        )  # fmt: skip
        return raw.headers, first, second

    headers, first, second = async_to_sync(loop)()
    assert headers["x-contextsvc-session"] == "ses_rs1"
    assert [item.type for item in first.output] == ["reasoning", "function_call"]
    assert second.output_text == "Two files."
    assert roles("ses_rs1") == ["user", "assistant", "tool", "assistant"]
    sent = fake.responses_requests()[-1]
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    body = sent.body
    # the fake refuses a reasoning item not sent back verbatim: it reached it whole
    reasoning = [i for i in body["input"] if i.get("type") == "reasoning"]
    assert reasoning and reasoning[0]["encrypted_content"] in fake.issued
    assert "Base prompt." in body["instructions"] and "You are terse." in body["instructions"]
    assert body["store"] is False and "previous_response_id" not in body
    assert body["prompt_cache_key"] == "pck-1"
    assert {"type": "web_search"} in body["tools"]
    assert "reasoning.encrypted_content" in body["include"]
    fn = next(t for t in body["tools"] if t.get("name") == "exec_command")
    assert fn["strict"] is False
    assert UsageReport.objects.filter(session__external_id="ses_rs1").count() == 2
    assert Session.objects.get(external_id="ses_rs1").max_output_tokens == 3000


def test_streaming_create_relays_events_and_records(fake_responses, alice_key):
    fake_responses.script(ScriptedReply(text="Streaming works fine."))

    async def call():
        client = asgi_responses(alice_key[1], session="ses_rs2")
        stream = await client.responses.create(model=MODEL, input="stream please", stream=True)
        return [event async for event in stream]

    events = async_to_sync(call)()
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Streaming works fine."
    assert roles("ses_rs2") == ["user", "assistant"]
    stored = Message.objects.get(session__external_id="ses_rs2", role="assistant")
    assert "Streaming works fine." in json.dumps(stored.content)
    assert UsageReport.objects.filter(session__external_id="ses_rs2").count() == 1


def test_responses_stream_helper_gets_final_response(fake_responses, alice_key):
    fake_responses.script(ScriptedReply(tool_calls=[tool_call("exec_command", {"cmd": "pwd"})]))

    async def call():
        client = asgi_responses(alice_key[1], session="ses_rs3")
        async with client.responses.stream(model=MODEL, input="where am I?", tools=TOOLS[:1]) as s:
            async for _ in s:
                pass
            return await s.get_final_response()

    final = async_to_sync(call)()
    assert final.output[0].type == "function_call"
    assert json.loads(final.output[0].arguments) == {"cmd": "pwd"}


def test_store_previous_response_id_get_and_delete(fake_responses, alice_key, bob_key):
    fake_responses.script(ScriptedReply(text="Hello Ann."), ScriptedReply(text="Your name is Ann."))

    async def run():
        client = asgi_responses(alice_key[1])
        first = await client.responses.create(model=MODEL, input="I am Ann.")
        second = await client.responses.create(
            model=MODEL, input="What is my name?", previous_response_id=first.id
        )
        got = await client.responses.retrieve(second.id)
        stranger = asgi_responses(bob_key[1])
        with pytest.raises(openai.NotFoundError):
            await stranger.responses.retrieve(second.id)
        with pytest.raises(openai.BadRequestError):  # not the head of its conversation
            await client.responses.create(model=MODEL, input="again", previous_response_id=first.id)
        await client.responses.delete(second.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(second.id)
        return first, second, got

    first, second, got = async_to_sync(run)()
    assert got.id == second.id and got.output_text == "Your name is Ann."
    sent = fake_responses.responses_requests()[-1].body
    # the stateless upstream got the whole conversation, not a previous_response_id
    texts = json.dumps(sent["input"])
    assert "I am Ann." in texts and "Hello Ann." in texts and "What is my name?" in texts
    session = Message.objects.get(content="What is my name?").session
    assert roles(session.external_id) == ["user", "assistant", "user", "assistant"]


def test_a_final_report_call_reaches_the_responses_client_as_a_message(fake_responses, alice_key):
    """docs/concepts/guard.md#final-turn: on a final turn the client, which has no final-report
    tool, gets the report as an assistant message, whole and streamed; the stored reply and
    the client's echo of it agree (no divergence)."""
    report = "Fixed app.py; the tests of b.py remain."
    fake = fake_responses
    items: list = [{"role": "user", "content": "fix app.py"}]

    async def call(stream: bool):
        client = asgi_responses(alice_key[1], session="ses_rs_final")
        if not stream:
            return await client.responses.create(model=MODEL, input=items, tools=TOOLS, store=False)
        events = []
        async with client.responses.stream(model=MODEL, input=items, tools=TOOLS, store=False) as s:
            async for event in s:
                events.append(event.type)
            return events, await s.get_final_response()

    first = async_to_sync(call)(False)
    items += [*[o.model_dump(exclude_none=True) for o in first.output],
              {"role": "user", "content": "go on"}]  # fmt: skip
    session_mark_final(session=Session.objects.get(external_id="ses_rs_final"), reason="context")
    fake.script(ScriptedReply(tool_calls=[tool_call("final_report", {"report": report})]))
    whole = async_to_sync(call)(False)
    assert [o.type for o in whole.output] == ["message"] and whole.output_text == report
    items += [*[o.model_dump(exclude_none=True) for o in whole.output],
              {"role": "user", "content": "and?"}]  # fmt: skip
    fake.script(ScriptedReply(tool_calls=[tool_call("final_report", {"report": report})]))
    kinds, streamed = async_to_sync(call)(True)
    assert "response.function_call_arguments.delta" not in kinds
    assert [o.type for o in streamed.output] == ["message"] and streamed.output_text == report
    last = Message.objects.filter(session__external_id="ses_rs_final", role="assistant").latest(
        "seq"
    )
    assert not last.tool_calls
    assert not Message.objects.filter(
        session__external_id="ses_rs_final", content__contains="client's history changed"
    ).exists()
