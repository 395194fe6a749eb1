"""The Chat Completions proxy, driven by the official openai SDK against the ASGI app in process."""

from __future__ import annotations

import json

from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply, tool_call
from sessions.models import Message, Session, UsageReport
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY, asgi_gpt

pytestmark = PROXY_DB

MODEL = "gpt-4o"
FUNCTIONS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
]


def roles(sid: str) -> list[str]:
    session = Session.objects.get(external_id=sid)
    return list(
        Message.objects.filter(session=session).order_by("seq").values_list("role", flat=True)
    )


def test_non_streaming_tool_loop(upstreams, alice_key):
    _, fake = upstreams
    fake.script(
        ScriptedReply(tool_calls=[tool_call("read_file", {"path": "a.py"}, id="call_a")]),
        ScriptedReply(text="It prints 1."),
    )

    async def loop():
        client = asgi_gpt(alice_key[1], session="ses_oa1")
        messages = [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "what does a.py print?"},
        ]
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, tools=FUNCTIONS, max_tokens=300
        )
        first = raw.parse()
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": "call_a", "content": "print(1)"})
        second = await client.chat.completions.create(
            model=MODEL, messages=messages, tools=FUNCTIONS, max_tokens=300
        )
        return raw.headers, first, second

    headers, first, second = async_to_sync(loop)()
    assert headers["x-contextsvc-session"] == "ses_oa1"
    assert first.choices[0].message.tool_calls[0].id == "call_a"
    assert second.choices[0].message.content == "It prints 1."
    assert roles("ses_oa1") == ["user", "assistant", "tool", "assistant"]
    sent = fake.chat_requests()[-1]
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert sent.body["messages"][0]["role"] == "system"
    assert "You are terse." in sent.body["messages"][0]["content"]
    session = Session.objects.get(external_id="ses_oa1")
    assert session.max_output_tokens == 300 and session.provider == "openai"


def test_streaming_relays_chunks_and_records_usage(upstreams, alice_key):
    _, fake = upstreams
    fake.script(ScriptedReply(text="Streaming works fine."))

    async def call():
        client = asgi_gpt(alice_key[1], session="ses_oa2")
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "stream please"}], stream=True
        )
        return [chunk async for chunk in stream]

    chunks = async_to_sync(call)()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Streaming works fine."
    assert roles("ses_oa2") == ["user", "assistant"]
    stored = Message.objects.get(session__external_id="ses_oa2", role="assistant")
    assert "Streaming works fine." in json.dumps(stored.content)
    assert UsageReport.objects.filter(session__external_id="ses_oa2").count() == 1
    assert fake.chat_requests()[-1].body["stream_options"] == {"include_usage": True}
