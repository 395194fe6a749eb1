"""Smaller proxy behaviours: a later max_tokens reaches the session (the guard uses it); a
final-report call reaches a client that does not define that tool as the answer's text."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply, tool_call
from sessions.models import Message, Session, UsageReport
from sessions.status import session_mark_final
from tests.proxy.conftest import PROXY_DB, asgi_claude, asgi_gpt

pytestmark = PROXY_DB


def test_a_changed_max_tokens_updates_the_session_for_the_guard(upstreams, alice_key, alice):
    key = alice_key[1]
    history = [{"role": "user", "content": "hi"}]

    async def claude(max_tokens: int):
        client = asgi_claude(key, session="ses_mt_a")
        return await client.messages.create(
            model="claude-opus-4-5", max_tokens=max_tokens, messages=history
        )

    async_to_sync(claude)(1000)
    assert Session.objects.get(external_id="ses_mt_a").max_output_tokens == 1000
    before = alice.get("sessions/ses_mt_a/budget").json()
    async_to_sync(claude)(4000)
    assert Session.objects.get(external_id="ses_mt_a").max_output_tokens == 4000
    after = alice.get("sessions/ses_mt_a/budget").json()
    # The guard reserves the new output: its limit shrinks by the difference.
    assert after["guard"]["limit"] == before["guard"]["limit"] - 3000


def test_max_completion_tokens_of_a_later_openai_request_is_followed(upstreams, alice_key):
    key = alice_key[1]

    async def gpt(**limit):
        client = asgi_gpt(key, session="ses_mt_o")
        return await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], **limit
        )

    async_to_sync(gpt)(max_tokens=500)
    async_to_sync(gpt)(max_completion_tokens=700)
    assert Session.objects.get(external_id="ses_mt_o").max_output_tokens == 700


REPORT = "Fixed app.py; the tests of b.py remain."
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]


def _final(sid: str) -> None:
    session_mark_final(session=Session.objects.get(external_id=sid), reason="context")


def _last_assistant(sid: str) -> Message:
    return Message.objects.filter(session__external_id=sid, role="assistant").latest("seq")


def test_a_final_report_call_reaches_the_anthropic_client_as_text(upstreams, alice_key):
    fake, _ = upstreams
    key = alice_key[1]
    history = [{"role": "user", "content": "fix app.py"}]

    async def claude(**kwargs):
        client = asgi_claude(key, session="ses_fr_a")
        return await client.messages.create(
            model="claude-opus-4-5", max_tokens=256, messages=history, tools=TOOLS, **kwargs
        )

    first = async_to_sync(claude)()
    _final("ses_fr_a")
    fake.script(ScriptedReply(tool_calls=[tool_call("final_report", {"report": REPORT})]))
    history += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "go on"},
    ]
    reply = async_to_sync(claude)()
    sent = fake.messages_requests()[-1].body
    assert [t["name"] for t in sent["tools"]] == ["final_report"]  # the final turn's one tool
    assert [(b.type, b.text) for b in reply.content] == [("text", REPORT)]
    assert reply.stop_reason == "end_turn"
    stored = _last_assistant("ses_fr_a")
    assert not stored.tool_calls and REPORT in str(stored.content)

    # Streamed: the same, and the client's history then echoes the text (no divergence).
    fake.script(ScriptedReply(tool_calls=[tool_call("final_report", {"report": REPORT})]))
    history += [{"role": "assistant", "content": REPORT}, {"role": "user", "content": "and?"}]

    async def streamed():
        client = asgi_claude(key, session="ses_fr_a")
        async with client.messages.stream(
            model="claude-opus-4-5", max_tokens=256, messages=history, tools=TOOLS
        ) as stream:
            return await stream.get_final_message()

    message = async_to_sync(streamed)()
    assert [(b.type, b.text) for b in message.content] == [("text", REPORT)]
    assert message.stop_reason == "end_turn"
    assert not _last_assistant("ses_fr_a").tool_calls
    assert not Message.objects.filter(
        session__external_id="ses_fr_a", content__contains="client's history changed"
    ).exists()


def test_a_final_report_call_reaches_the_openai_client_as_text(upstreams, alice_key):
    _, fake = upstreams
    key = alice_key[1]
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    messages = [{"role": "user", "content": "fix app.py"}]

    async def gpt(stream: bool):
        client = asgi_gpt(key, session="ses_fr_o")
        if not stream:
            return await client.chat.completions.create(
                model="gpt-4o", messages=messages, tools=tools
            )
        text, calls, finish = "", [], None
        async for chunk in await client.chat.completions.create(
            model="gpt-4o", messages=messages, tools=tools, stream=True
        ):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                calls += choice.delta.tool_calls or []
                finish = choice.finish_reason or finish
        return text, calls, finish

    first = async_to_sync(gpt)(False)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "go on"},
    ]
    _final("ses_fr_o")
    fake.script(ScriptedReply(tool_calls=[tool_call("final_report", {"report": REPORT})]))
    reply = async_to_sync(gpt)(False)
    choice = reply.choices[0]
    assert choice.message.content == REPORT and not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    fake.script(ScriptedReply(tool_calls=[tool_call("final_report", {"report": REPORT})]))
    messages += [{"role": "assistant", "content": REPORT}, {"role": "user", "content": "and?"}]
    text, calls, finish = async_to_sync(gpt)(True)
    assert (text, calls, finish) == (REPORT, [], "stop")
    assert not _last_assistant("ses_fr_o").tool_calls
    assert not Message.objects.filter(
        session__external_id="ses_fr_o", content__contains="client's history changed"
    ).exists()


def test_openai_streams_get_the_usage_chunk_only_when_the_client_asked(upstreams, alice_key):
    _, fake = upstreams
    key = alice_key[1]

    async def stream(sid: str, **options):
        client = asgi_gpt(key, session=sid)
        chunks = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True, **options
        )
        return [chunk async for chunk in chunks]

    # Not asked: the proxy asks upstream for the usage, stores it, and strips the chunk.
    chunks = async_to_sync(stream)("ses_su_1")
    assert fake.chat_requests()[-1].body["stream_options"] == {"include_usage": True}
    assert chunks and all(c.choices for c in chunks) and not any(c.usage for c in chunks)
    assert UsageReport.objects.filter(session__external_id="ses_su_1").count() == 1
    # Asked: the client's stream_options go up as they are, the usage chunk comes down.
    chunks = async_to_sync(stream)("ses_su_2", stream_options={"include_usage": True})
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert UsageReport.objects.filter(session__external_id="ses_su_2").count() == 1
    # Set otherwise: nothing added.
    async_to_sync(stream)("ses_su_3", stream_options={"include_usage": False})
    assert fake.chat_requests()[-1].body["stream_options"] == {"include_usage": False}
