"""Reasoning sent back as the provider requires (docs/concepts/compaction.md#strip-trailing-calls
pairing, Anthropic thinking rules).

The fake Messages server enforces the real API's extended-thinking rules; the
engine's anthropic build must pass them, and may drop older turns' thinking.
"""

from __future__ import annotations

import hashlib

import pytest

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.reasoning import drop_old_reasoning
from fakes.anthropic_rules import InvalidRequest, validate


def thinking(text: str) -> dict:
    return {
        "type": "thinking",
        "thinking": text,
        "signature": hashlib.sha256(text.encode()).hexdigest(),
    }


THINK = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
TOOLS = [ToolDef(name="read", description="Read a file")]


def history() -> list[Message]:
    return [
        Message(role="user", content="fix the bug", seq=1),
        Message(
            role="assistant",
            content=[thinking("look at a.py first"), {"type": "text", "text": "Reading."}],
            tool_calls=(ToolCall(id="t1", name="read", arguments={"p": "a.py"}),),
            seq=2,
        ),
        Message(role="tool", content="print(1)", tool_call_id="t1", seq=3),
        Message(
            role="assistant", content=[thinking("fixed"), {"type": "text", "text": "Done."}], seq=4
        ),
        Message(role="user", content="now b.py", seq=5),
        Message(
            role="assistant",
            content=[thinking("b.py next")],
            tool_calls=(ToolCall(id="t2", name="read", arguments={"p": "b.py"}),),
            seq=6,
        ),
        Message(role="tool", content="print(2)", tool_call_id="t2", seq=7),
    ]


def body(keep: int | None) -> dict:
    parts = ContextParts(
        model="claude-sonnet-4-5",
        max_output_tokens=100,
        messages=history(),
        tools=TOOLS,
        keep_thinking_turns=keep,
    )
    return {**build_request("anthropic", parts), **THINK}


def kinds(message: dict) -> list[str]:
    return [b["type"] for b in message["content"]]


@pytest.mark.parametrize("keep", [None, 1, 2])
def test_reasoning_current_turn_thinking_goes_back_first_with_its_signature(keep):
    sent = body(keep)
    validate(sent)  # the fake enforces the API's thinking rules
    loop = sent["messages"][-2]
    assert kinds(loop) == ["thinking", "tool_use"]
    assert loop["content"][0] == thinking("b.py next")


def test_reasoning_older_turns_kept_by_default_dropped_when_configured():
    assert kinds(body(None)["messages"][1]) == ["thinking", "text", "tool_use"]
    dropped = body(1)["messages"]
    assert kinds(dropped[1]) == ["text", "tool_use"]
    assert "look at a.py first" not in str(dropped[:-2])
    assert kinds(body(2)["messages"][1]) == ["thinking", "text", "tool_use"]


def test_reasoning_drop_keeps_messages_and_their_order():
    msgs = history()
    out = drop_old_reasoning(msgs, 1)
    assert [m.seq for m in out] == [m.seq for m in msgs]
    assert out[1].reasoning is None and out[5] is msgs[5]
    assert drop_old_reasoning(msgs, None) is msgs


def test_reasoning_fake_server_rejects_a_tool_loop_without_its_thinking():
    sent = body(None)
    sent["messages"][-2]["content"] = sent["messages"][-2]["content"][1:]  # thinking lost
    with pytest.raises(InvalidRequest, match="Expected `thinking` or `redacted_thinking`"):
        validate(sent)
    # Without thinking enabled the same body is fine.
    validate({k: v for k, v in sent.items() if k != "thinking"})


def test_reasoning_fake_server_rejects_an_altered_signature():
    sent = body(None)
    sent["messages"][-2]["content"][0] = {**thinking("b.py next"), "thinking": "edited"}
    with pytest.raises(InvalidRequest, match="Invalid `signature`"):
        validate(sent)


def test_reasoning_fake_server_rejects_thinking_in_a_final_prefill_when_disabled():
    sent = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [thinking("hmm")]},
        ],
    }
    with pytest.raises(InvalidRequest, match="When thinking is disabled"):
        validate(sent)
    validate({**sent, **THINK})
