"""The proxy's built-in loop at its round limit: the last round is sent without the
built-ins, and the client never gets an empty answer (``policy.proxy.max_builtin_rounds``)."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply, tool_call
from proxy.services.builtins import MAX_ROUNDS, without_builtins
from sessions.models import AgentKey, Message, ToolOutput
from sessions.services.sessions import session_create
from tests.proxy import responses_fixtures
from tests.proxy.conftest import PROXY_DB, asgi_claude, asgi_gpt
from tests.proxy.responses_fixtures import asgi_responses

pytestmark = PROXY_DB
fake_responses = responses_fixtures.fake_responses

MODEL = "claude-opus-4-5"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]
BUILTINS = {"tool_output_cache", "tool_output_cache_grep", "compact_context"}


def greps(n: int, prefix: str = "toolu") -> list[ScriptedReply]:
    """``n`` answers that each call only a built-in (a model looping on grep)."""
    return [
        ScriptedReply(
            tool_calls=[
                tool_call(
                    "tool_output_cache_grep",
                    {"ref_id": "out_missing", "pattern": f"p{i}"},
                    id=f"{prefix}_g{i}",
                )
            ]
        )
        for i in range(n)
    ]


def with_rounds(alice_key, sid: str, rounds: int, model: str = MODEL) -> None:
    session_create(
        owner=AgentKey.objects.get(pk=alice_key[0].pk),
        data={"model": model, "id": sid, "policy": {"proxy": {"max_builtin_rounds": rounds}}},
    )


def tool_names(request) -> set[str]:
    return {t.get("name") or t["function"]["name"] for t in request.body.get("tools") or ()}


def roles(sid: str) -> list[str]:
    rows = Message.objects.filter(session__external_id=sid).order_by("seq")
    return list(rows.values_list("role", flat=True))


def test_at_the_default_limit_the_last_round_has_no_builtins_and_the_answer_is_not_empty(
    upstreams, alice_key
):
    fake, _ = upstreams
    fake.script(*greps(MAX_ROUNDS))
    before = len(fake.messages_requests())

    async def call():
        client = asgi_claude(alice_key[1], session="ses_lim1")
        return await client.messages.create(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=[{"role": "user", "content": "go"}]
        )

    reply = async_to_sync(call)()
    sent = fake.messages_requests()[before:]
    assert len(sent) == MAX_ROUNDS == 8
    assert all(BUILTINS <= tool_names(r) for r in sent[:-1])
    assert tool_names(sent[-1]) == {"read_file"}
    assert [b.type for b in reply.content] == ["text"]
    text = reply.content[0].text
    assert "round limit (8" in text and "tool_output_cache_grep" in text and '"p7"' in text
    assert reply.stop_reason == "end_turn"
    # every built-in call stored with its result; the note is the last answer's text
    assert roles("ses_lim1") == ["user", *["assistant", "tool"] * 8]
    last = Message.objects.filter(session__external_id="ses_lim1", role="assistant").last()
    assert "round limit" in last.content
    # The client sends the note back as its history: it matches what is stored (no divergence).
    fake.script(ScriptedReply(text="Going on."))
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
        {"role": "user", "content": "go on"},
    ]

    async def again():
        client = asgi_claude(alice_key[1], session="ses_lim1")
        return await client.messages.create(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=history
        )

    assert async_to_sync(again)().content[0].text == "Going on."
    assert roles("ses_lim1") == ["user", *["assistant", "tool"] * 8, "user", "assistant"]


def test_the_policy_sets_the_rounds_and_a_stream_ends_with_the_note(upstreams, alice_key):
    fake, _ = upstreams
    with_rounds(alice_key, "ses_lim2", 2)
    fake.script(*greps(2))
    before = len(fake.messages_requests())

    async def call():
        client = asgi_claude(alice_key[1], session="ses_lim2")
        async with client.messages.stream(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            events = [event.type async for event in stream]
            return events, await stream.get_final_message()

    events, final = async_to_sync(call)()
    sent = fake.messages_requests()[before:]
    assert len(sent) == 2
    assert BUILTINS <= tool_names(sent[0]) and tool_names(sent[1]) == {"read_file"}
    assert events.count("message_start") == 1 and events.count("message_stop") == 1
    assert [b.type for b in final.content] == ["text"]
    assert "round limit (2" in final.content[0].text and '"p1"' in final.content[0].text
    assert final.stop_reason == "end_turn"
    assert roles("ses_lim2") == ["user", "assistant", "tool", "assistant", "tool"]


def test_one_round_sends_no_builtins_and_a_client_call_still_goes_through(upstreams, alice_key):
    fake, _ = upstreams
    with_rounds(alice_key, "ses_lim3", 1)
    fake.script(ScriptedReply(tool_calls=[tool_call("read_file", {"path": "a"}, id="toolu_r")]))
    before = len(fake.messages_requests())

    async def call():
        client = asgi_claude(alice_key[1], session="ses_lim3")
        return await client.messages.create(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=[{"role": "user", "content": "go"}]
        )

    reply = async_to_sync(call)()
    (sent,) = fake.messages_requests()[before:]
    assert tool_names(sent) == {"read_file"}
    assert [b.type for b in reply.content] == ["tool_use"] and reply.stop_reason == "tool_use"


def test_chat_completions_at_the_limit(upstreams, alice_key):
    _, fake = upstreams
    with_rounds(alice_key, "ses_lim4", 2, model="gpt-4o")
    fake.script(*greps(2, "call"))
    before = len(fake.chat_requests())

    async def call():
        client = asgi_gpt(alice_key[1], session="ses_lim4")
        return await client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "go"}],
            tools=[{"type": "function", "function": {"name": "read_file", "parameters": {}}}],
        )

    reply = async_to_sync(call)()
    sent = fake.chat_requests()[before:]
    assert len(sent) == 2
    assert BUILTINS <= tool_names(sent[0]) and tool_names(sent[1]) == {"read_file"}
    choice = reply.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    assert "round limit (2" in choice.message.content


def test_chat_completions_stream_at_the_limit(upstreams, alice_key):
    _, fake = upstreams
    with_rounds(alice_key, "ses_lim5", 1, model="gpt-4o")
    fake.script(*greps(1, "call"))

    async def call():
        client = asgi_gpt(alice_key[1], session="ses_lim5")
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "go"}], stream=True
        )
        return [chunk async for chunk in stream]

    chunks = async_to_sync(call)()
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("[contextsvc proxy") and "round limit (1" in text
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_at_the_limit(fake_responses, alice_key, stream):
    sid = f"ses_lim6{int(stream)}"
    with_rounds(alice_key, sid, 2, model="gpt-4o")
    fake_responses.script(*greps(2, "call"))
    before = len(fake_responses.responses_requests())

    async def call():
        client = asgi_responses(alice_key[1], session=sid)
        if not stream:
            return await client.responses.create(model="gpt-4o", input="go")
        async with client.responses.stream(model="gpt-4o", input="go") as events:
            async for _ in events:
                pass
            return await events.get_final_response()

    response = async_to_sync(call)()
    sent = fake_responses.responses_requests()[before:]
    assert len(sent) == 2
    assert BUILTINS <= tool_names(sent[0]) and not tool_names(sent[1])
    assert [item.type for item in response.output] == ["message"]
    assert "round limit (2" in response.output_text


def test_without_builtins_drops_a_tool_choice_naming_one():
    names = frozenset({"tool_output_cache"})
    body = {
        "tools": [{"name": "read_file"}, {"name": "tool_output_cache"}],
        "tool_choice": {"type": "tool", "name": "tool_output_cache"},
    }
    assert without_builtins(body, names) == {"tools": [{"name": "read_file"}]}
    chat = {
        "tools": [{"type": "function", "function": {"name": "tool_output_cache"}}],
        "tool_choice": "required",
    }
    assert without_builtins(chat, names) == {}
    kept = {**body, "tool_choice": {"type": "tool", "name": "read_file"}}
    assert without_builtins(kept, names)["tool_choice"] == {"type": "tool", "name": "read_file"}


@pytest.mark.parametrize("value", [0, 33, "many"])
def test_max_builtin_rounds_is_validated(alice, value):
    response = alice.post(
        "sessions", {"model": MODEL, "policy": {"proxy": {"max_builtin_rounds": value}}}
    )
    assert response.status_code == 422
    assert "max_builtin_rounds" in response.json()["error"]["message"]


def test_max_builtin_rounds_is_kept_and_shown(alice):
    response = alice.post(
        "sessions",
        {"model": MODEL, "id": "ses_lim7", "policy": {"proxy": {"max_builtin_rounds": 32}}},
    )
    assert response.status_code == 201
    assert response.json()["policy"]["proxy"]["max_builtin_rounds"] == 32


# --- a built-in's result: kept in its message, pointing into the ref it read ----------

BIG = "".join(f"{i}: {'match' if i % 2 else 'other'} {'y' * 50}\n" for i in range(2000))


def test_a_proxied_grep_points_into_the_ref_it_read_and_stores_no_output(upstreams, alice_key):
    fake, _ = upstreams
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_r1", "name": "read_file", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_r1", "content": BIG}],
        },
    ]
    fake.script(ScriptedReply(text="Stored."))

    async def call(messages):
        client = asgi_claude(alice_key[1], session="ses_lim8")
        return await client.messages.create(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=messages
        )

    first = async_to_sync(call)(history)
    ref = Message.objects.get(session__external_id="ses_lim8", role="tool").output_ref
    outputs = ToolOutput.objects.count()
    grep = {"ref_id": ref, "pattern": "match", "max_matches": 5}
    fake.script(
        ScriptedReply(tool_calls=[tool_call("tool_output_cache_grep", grep, id="toolu_g")]),
        ScriptedReply(text="Five matches."),
    )
    history += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "grep it"},
    ]
    assert async_to_sync(call)(history).content[0].text == "Five matches."
    assert ToolOutput.objects.count() == outputs
    result = Message.objects.get(session__external_id="ses_lim8", tool_call_id="toolu_g")
    assert result.output_ref == ref and result.view_state == "full"
    assert len(json.loads(result.content)["matches"]) == 5


def test_a_chat_completions_grep_over_the_view_limit_is_cut(upstreams, alice_key):
    _, fake = upstreams
    session_create(
        owner=AgentKey.objects.get(pk=alice_key[0].pk),
        data={
            "model": "gpt-4o",
            "id": "ses_lim9",
            "policy": {"tool_output_cache": {"max_message_bytes": 4096}},
        },
    )
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_r1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_r1", "content": BIG},
    ]
    fake.script(ScriptedReply(text="Stored."))

    async def call(messages):
        client = asgi_gpt(alice_key[1], session="ses_lim9")
        return await client.chat.completions.create(model="gpt-4o", messages=messages)

    async_to_sync(call)(history)
    ref = Message.objects.get(session__external_id="ses_lim9", role="tool").output_ref
    outputs = ToolOutput.objects.count()
    grep = {"ref_id": ref, "pattern": "match", "max_matches": 400}
    fake.script(
        ScriptedReply(tool_calls=[tool_call("tool_output_cache_grep", grep, id="call_g")]),
        ScriptedReply(text="Many matches."),
    )
    history += [{"role": "assistant", "content": "Stored."}, {"role": "user", "content": "grep"}]
    before = len(fake.chat_requests())
    assert async_to_sync(call)(history).choices[0].message.content == "Many matches."
    assert ToolOutput.objects.count() == outputs
    result = Message.objects.get(session__external_id="ses_lim9", tool_call_id="call_g")
    assert result.output_ref == ref and result.view_state == "cut"
    assert len(result.view.encode()) <= 4096 < len(result.content)
    # upstream's next round saw the cut view, not the whole result
    sent = fake.chat_requests()[before + 1].body["messages"]
    answer = next(m for m in sent if m.get("tool_call_id") == "call_g")
    assert "characters of this tool_output_cache_grep result left out" in str(answer["content"])
