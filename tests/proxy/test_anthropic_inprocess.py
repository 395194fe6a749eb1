"""The Anthropic Messages proxy, driven by the official SDK against the ASGI app in process."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply, tool_call
from sessions.models import Message, Session, UsageReport
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY, asgi_claude

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]


def run(coro_fn):
    return async_to_sync(coro_fn)()


def test_non_streaming_call_is_stored_and_answered(upstreams, alice_key):
    fake, _ = upstreams
    fake.script(ScriptedReply(text="Hello from upstream"))

    async def call():
        client = asgi_claude(alice_key[1], session="ses_px1")
        raw = await client.messages.with_raw_response.create(
            model=MODEL,
            max_tokens=512,
            system="You are terse.",
            messages=[{"role": "user", "content": "hi"}],
        )
        return raw, await raw.parse()

    raw, message = run(call)
    assert message.content[0].text == "Hello from upstream"
    assert raw.headers["x-contextsvc-session"] == "ses_px1"
    assert raw.headers["x-contextsvc-guard"] == "ok"
    session = Session.objects.get(external_id="ses_px1")
    assert session.max_output_tokens == 512
    roles = list(
        Message.objects.filter(session=session).order_by("seq").values_list("role", flat=True)
    )
    assert roles == ["user", "assistant"]
    assert UsageReport.objects.filter(session=session).count() == 1
    sent = fake.messages_requests()[-1]
    assert sent.headers.get("x-api-key") == UPSTREAM_KEY
    assert "x-contextsvc-key" not in {k.lower() for k in sent.headers}
    assert sent.body["system"]


def test_streaming_tool_loop_appends_only_what_is_new(upstreams, alice_key):
    fake, _ = upstreams
    fake.script(
        ScriptedReply(
            text="Reading.", tool_calls=[tool_call("read_file", {"path": "a.py"}, id="toolu_a")]
        ),
        ScriptedReply(text="Done."),
    )

    async def loop():
        client = asgi_claude(alice_key[1], session="ses_px2")
        messages = [{"role": "user", "content": "read a.py"}]
        async with client.messages.stream(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=messages
        ) as stream:
            first = await stream.get_final_message()
        messages.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "print(1)"}
                ],
            }
        )
        async with client.messages.stream(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=messages
        ) as stream:
            second = await stream.get_final_message()
        return first, second

    first, second = run(loop)
    assert [b.type for b in first.content] == ["text", "tool_use"]
    assert second.content[0].text == "Done."
    session = Session.objects.get(external_id="ses_px2")
    rows = list(
        Message.objects.filter(session=session).order_by("seq").values_list("role", flat=True)
    )
    assert rows == ["user", "assistant", "tool", "assistant"]
    assert UsageReport.objects.filter(session=session).count() == 2
