"""Built-in tools inside the proxy: the model calls them, the client never sees those calls."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply, tool_call
from sessions.models import AgentKey, ContextCall, Message, Session
from sessions.services.sessions import session_create
from tests.proxy.conftest import PROXY_DB, asgi_claude, asgi_gpt

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]


def roles(sid: str) -> list[str]:
    return list(
        Message.objects.filter(session__external_id=sid)
        .order_by("seq")
        .values_list("role", flat=True)
    )


def claude(key: str, sid: str, messages: list[dict], **kwargs):
    async def call():
        client = asgi_claude(key, session=sid)
        return await client.messages.create(
            model=MODEL, max_tokens=256, messages=messages, tools=TOOLS, **kwargs
        )

    return async_to_sync(call)()


def test_a_builtin_call_is_run_by_the_proxy_and_upstream_asked_again(upstreams, alice_key):
    fake, _ = upstreams
    fake.script(
        ScriptedReply(
            tool_calls=[tool_call("tool_output_cache", {"ref_id": "out_x"}, id="toolu_b1")]
        ),
        ScriptedReply(text="The answer, after reading."),
    )
    before = len(fake.messages_requests())
    reply = claude(alice_key[1], "ses_b1", [{"role": "user", "content": "go"}])
    assert [b.type for b in reply.content] == ["text"]
    assert reply.content[0].text == "The answer, after reading."
    calls = fake.messages_requests()[before:]
    assert len(calls) == 2
    tools_sent = {t["name"] for t in calls[0].body["tools"]}
    assert {"read_file", "tool_output_cache"} <= tools_sent
    second = str(calls[1].body["messages"])
    assert "toolu_b1" in second and "tool_result" in second
    assert roles("ses_b1") == ["user", "assistant", "tool", "assistant"]
    # docs/proxy.md#failed-calls: each round's record has upstream's outcome; the client
    # saw only the last round's status.
    records = ContextCall.objects.filter(session__external_id="ses_b1").order_by("pk")
    assert [(r.upstream_status, r.client_status, r.failed) for r in records] == [
        (200, None, False),
        (200, 200, False),
    ]


def test_a_mixed_answer_reaches_the_client_without_the_builtin_call(upstreams, alice_key):
    fake, _ = upstreams
    fake.script(
        ScriptedReply(
            text="Both.",
            tool_calls=[
                tool_call("read_file", {"path": "a.py"}, id="toolu_c"),
                tool_call("compact_context", {}, id="toolu_b2"),
            ],
        ),
        ScriptedReply(text="Done."),
    )
    history = [{"role": "user", "content": "go"}]
    reply = claude(alice_key[1], "ses_b2", history)
    assert [b.name for b in reply.content if b.type == "tool_use"] == ["read_file"]
    history += [
        {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_c", "content": "x = 1"}],
        },
    ]
    final = claude(alice_key[1], "ses_b2", history)
    assert final.content[0].text == "Done."  # upstream accepted both results after the calls
    assert roles("ses_b2") == ["user", "assistant", "tool", "tool", "assistant"]


def test_builtin_tools_off_by_policy_are_not_offered(upstreams, alice_key):
    fake, _ = upstreams
    session_create(
        owner=AgentKey.objects.get(pk=alice_key[0].pk),
        data={"model": MODEL, "id": "ses_b3", "policy": {"proxy": {"builtin_tools": False}}},
    )
    claude(alice_key[1], "ses_b3", [{"role": "user", "content": "go"}])
    assert {t["name"] for t in fake.messages_requests()[-1].body["tools"]} == {"read_file"}
    assert Session.objects.get(external_id="ses_b3").policy["proxy"] == {"builtin_tools": False}


def test_openai_builtin_call_is_run_by_the_proxy(upstreams, alice_key):
    _, fake = upstreams
    fake.script(
        ScriptedReply(
            tool_calls=[
                tool_call(
                    "tool_output_cache_grep", {"ref_id": "out_x", "pattern": "a"}, id="call_b"
                )
            ]
        ),
        ScriptedReply(text="Grepped."),
    )

    async def call():
        client = asgi_gpt(alice_key[1], session="ses_b4")
        return await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "go"}]
        )

    reply = async_to_sync(call)()
    assert reply.choices[0].message.content == "Grepped."
    assert not reply.choices[0].message.tool_calls
    assert roles("ses_b4") == ["user", "assistant", "tool", "assistant"]


def test_streaming_stays_streaming_and_hides_the_builtin_round(upstreams, alice_key):
    fake, _ = upstreams
    fake.script(
        ScriptedReply(
            text="Let me look.",
            tool_calls=[tool_call("tool_output_cache", {"ref_id": "out_x"}, id="toolu_s1")],
        ),
        ScriptedReply(text="Found it."),
    )

    async def call():
        client = asgi_claude(alice_key[1], session="ses_b5")
        async with client.messages.stream(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=[{"role": "user", "content": "go"}]
        ) as stream:
            events = [event.type async for event in stream]
            return events, await stream.get_final_message()

    events, final = async_to_sync(call)()
    assert events.count("message_start") == 1 and events.count("message_stop") == 1
    assert [b.type for b in final.content] == ["text", "text"]
    assert final.content[0].text == "Let me look." and final.content[1].text == "Found it."
    assert final.stop_reason == "end_turn"
    assert roles("ses_b5") == ["user", "assistant", "tool", "assistant"]
    records = ContextCall.objects.filter(session__external_id="ses_b5").order_by("pk")
    outcomes = [(r.upstream_status, r.client_status, r.stream_cut) for r in records]
    assert outcomes == [(200, None, False), (200, 200, False)]
    assert all(r.stream_events for r in records)


def test_openai_streaming_hides_the_builtin_call(upstreams, alice_key):
    _, fake = upstreams
    fake.script(
        ScriptedReply(tool_calls=[tool_call("compact_context", {}, id="call_s2")]),
        ScriptedReply(text="Compacted and done."),
    )

    async def call():
        client = asgi_gpt(alice_key[1], session="ses_b6")
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "go"}], stream=True
        )
        return [chunk async for chunk in stream]

    chunks = async_to_sync(call)()
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Compacted and done."
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]
    assert roles("ses_b6") == ["user", "assistant", "tool", "assistant"]
