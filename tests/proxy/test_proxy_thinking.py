"""Extended thinking through the Anthropic proxy: the tool loop's signed thinking block goes
back upstream first, as the real API requires (the fake enforces it)."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply, tool_call
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]
THINKING = {"type": "enabled", "budget_tokens": 1024}


def test_reasoning_proxy_tool_loop_sends_the_thinking_block_back(upstreams, alice_key):
    fake, _ = upstreams
    fake.script(
        ScriptedReply(
            thinking="read a.py first",
            text="Reading.",
            tool_calls=[tool_call("read_file", {"path": "a.py"}, id="toolu_t1")],
        ),
        ScriptedReply(thinking="it prints 1", text="It prints 1."),
    )

    async def loop():
        client = asgi_claude(alice_key[1], session="ses_think")
        messages = [{"role": "user", "content": "what does a.py print?"}]
        first = await client.messages.create(
            model=MODEL, max_tokens=2048, tools=TOOLS, thinking=THINKING, messages=messages
        )
        messages.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_t1", "content": "1"}],
            }
        )
        second = await client.messages.create(
            model=MODEL, max_tokens=2048, tools=TOOLS, thinking=THINKING, messages=messages
        )
        return first, second

    first, second = async_to_sync(loop)()
    assert [b.type for b in first.content] == ["thinking", "text", "tool_use"]
    assert second.content[-1].text == "It prints 1."
    sent = fake.messages_requests()[-1]
    assert sent.status == 200, sent.error
    loop_turn = sent.body["messages"][-2]
    assert loop_turn["content"][0]["type"] == "thinking"
    assert loop_turn["content"][0]["signature"] == first.content[0].signature
