"""engine.native_export: a transcript converted a piece at a time is what the one
assembler makes of it in one pass, and every provider check accepts it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.native_export import NativeTranscript
from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from tests.fakes.transcripts import transcripts

TOOLS = [ToolDef(name="bash"), ToolDef(name="read")]
RULE = "Answer in one line."


@st.composite
def with_system_messages(draw) -> list[Message]:
    """Generated transcripts with a mid-conversation system message here and there."""
    messages = list(draw(transcripts()))
    for at in sorted(draw(st.lists(st.integers(0, len(messages)), max_size=2)), reverse=True):
        messages.insert(at, Message(role="system", content=RULE))
    return messages


def in_pieces(fmt: str, messages: list[Message], cuts: list[int], **kw) -> list[dict]:
    export = NativeTranscript(fmt, **kw)
    out: list[dict] = []
    edges = sorted({0, len(messages), *(c for c in cuts if c < len(messages))})
    for a, b in zip(edges, edges[1:], strict=False):
        out.extend(export.feed(messages[a:b]))
    return out + export.finish()


def one_pass(fmt: str, messages: list[Message], *, mid_system: bool = True) -> list[dict]:
    parts = ContextParts(
        model="m", max_output_tokens=100, messages=messages, tools=TOOLS, mid_system=mid_system
    )
    return build_request(fmt, parts)["messages"]


def check(fmt: str, out: list[dict]) -> None:
    body = {"model": "claude-opus-4-8", "max_tokens": 100, "messages": out}
    if fmt == "anthropic":
        validate({**body, "tools": [{"name": t.name, "input_schema": {}} for t in TOOLS]})
    else:
        validate_chat({**body, "tools": [{"type": "function", "function": {"name": "bash"}}]})


@settings(max_examples=300, deadline=None)
@given(
    messages=with_system_messages(),
    cuts=st.lists(st.integers(1, 16), max_size=6),
    fmt=st.sampled_from(["anthropic", "openai"]),
    mid_system=st.booleans(),
)
def test_a_transcript_in_pieces_is_the_one_pass_history(messages, cuts, fmt, mid_system):
    out = in_pieces(fmt, messages, cuts, mid_system=mid_system)
    whole = one_pass(fmt, messages, mid_system=mid_system)
    if out:
        assert out == whole
        check(fmt, out)
    else:  # nothing to send: a request would carry its one synthetic user line
        assert len(whole) == 1 and whole[0]["role"] == "user"


@settings(max_examples=200, deadline=None)
@given(
    messages=with_system_messages(),
    cuts=st.lists(st.integers(1, 16), max_size=6),
    fmt=st.sampled_from(["anthropic", "openai"]),
)
def test_the_pending_bound_still_gives_what_a_provider_accepts(messages, cuts, fmt):
    """With at most two messages held for a waiting call, pieces end inside exchanges."""
    out = in_pieces(fmt, messages, cuts, max_pending=2)
    if out:
        check(fmt, out)


def test_a_call_never_answered_holds_no_more_than_the_bound():
    export = NativeTranscript("openai", max_pending=10)
    call = Message(role="assistant", content="", tool_calls=(ToolCall("c1", "bash"),))
    # "go" is final at once; the call waits for its result.
    out = export.feed([Message(role="user", content="go"), call])
    assert out == [{"role": "user", "content": "go"}]
    for n in range(30):
        out.extend(export.feed([Message(role="user", content=f"u{n}")]))
        assert len(export._pending) <= 11
    out.extend(export.finish())
    assert [m["role"] for m in out[:3]] == ["user", "assistant", "tool"]
    assert "not answered" in out[2]["content"]
    assert [m["content"] for m in out[3:]] == [f"u{n}" for n in range(30)]


def test_a_reused_call_id_is_renamed_across_pieces_as_in_one_pass():
    def exchange(result: str) -> list[Message]:
        return [
            Message(role="user", content="again"),
            Message(role="assistant", content="", tool_calls=(ToolCall("c1", "bash"),)),
            Message(role="tool", content=result, tool_call_id="c1"),
        ]

    messages = exchange("one") + exchange("two")
    out = in_pieces("anthropic", messages, [3])
    assert out == one_pass("anthropic", messages)
    uses = [b["id"] for m in out for b in m["content"] if b.get("type") == "tool_use"]
    assert uses == ["c1", "c1_2"]


def test_an_unknown_format_is_refused():
    try:
        NativeTranscript("responses")
    except ValueError as exc:
        assert "responses" in str(exc)
    else:
        raise AssertionError("no error")
