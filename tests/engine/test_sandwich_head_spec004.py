"""The sandwich (docs/concepts/compaction.md#sandwich; CX-T3 / CX-T4 / CX-T7): the
top messages survive as real messages — roles, tool calls and results intact —
before the summary, not quoted inside a retained block; the summary goes in
the system role where the provider allows it; the layout passes the fake
Messages server's checks and the Chat Completions rules for any transcript."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request, head_count_of
from contextsvc.engine.messages import Message, PromptSection, ToolCall, ToolDef
from contextsvc.engine.recall import with_search_hint
from contextsvc.engine.strategies.base import StrategyContext, TokenCounter, Window
from contextsvc.engine.strategies.chain import run_chain
from contextsvc.engine.strategies.sandwich import SandwichStrategy, sandwich
from contextsvc.engine.summarize import SummaryRequest, SummaryResult
from contextsvc.engine.tokens import get_tokenizer
from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from fakes.responses_rules import validate_responses
from tests.engine.test_wellformed_property import check_bodies
from tests.fakes.transcripts import transcripts

COUNTER = TokenCounter(get_tokenizer())
SUMMARY = "[Earlier conversation summary: {}]"


class Numbered:
    """A summariser whose n-th summary is ``summary n`` (and which keeps what it was sent)."""

    name = "numbered"

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def complete(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(text=f"summary {len(self.requests)}", model="m", summarizer=self.name)


def numbered(msgs: list[Message], start: int = 1) -> list[Message]:
    for i, msg in enumerate(msgs, start=start):
        msg.seq = i
        msg.token_count = COUNTER.message(msg)
    return msgs


def agent_chat(turns: int, start: int = 1) -> list[Message]:
    """Turns of user → assistant tool call → tool result → assistant answer."""
    msgs: list[Message] = []
    for t in range(start, start + turns):
        msgs += [
            Message(role="user", content=f"task {t} " + "w " * 30),
            Message(
                role="assistant",
                content=f"reading {t}",
                tool_calls=(ToolCall(f"toolu_{t:03d}", "read", {"path": f"f{t}.py"}),),
            ),
            Message(role="tool", content=f"contents of f{t}.py", tool_call_id=f"toolu_{t:03d}"),
            Message(role="assistant", content=f"answer {t} " + "w " * 30),
        ]
    return msgs


def compacted(msgs: list[Message], summarizer: Numbered, **kw) -> Window:
    ctx = StrategyContext(counter=COUNTER, summarizer=summarizer, force=True, **kw)
    out = sandwich(Window(list(msgs)), ctx)
    assert out.report.applied, out.report.details
    return out.window


def parts_of(window: Window, role: str, **kw) -> ContextParts:
    return ContextParts(
        model="m",
        max_output_tokens=100,
        sections=[PromptSection(name="base", content="You are an agent.", cacheable=True)],
        retain=window.retain,
        summary=window.summary,
        messages=[*window.head, *window.messages],
        tools=[ToolDef(name="read")],
        summary_role=role,
        head_count=len(window.head),
        **kw,
    )


def blocks(message: dict) -> list[dict]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


# --- the head as real messages ----------------------------------------------------------------


def test_spec004_sandwich_head_messages_survive_as_messages_at_a_turn_boundary():
    msgs = numbered(agent_chat(6))
    window = compacted(msgs, Numbered())
    # preserve_top 5 falls inside turn 2 (after its tool result): the head grows
    # to the turn's end, so no call is parted from its result
    # (docs/concepts/context-build.md#turns).
    assert window.head == msgs[:8]
    assert msgs[len(window.head)].role == "user"
    assert window.retain == "" and window.summary == "summary 1"
    assert window.messages == msgs[-5:]


def test_spec004_sandwich_head_stays_small_when_the_first_turn_is_long():
    # An agent's first turn: one task, 40 tool iterations. The next turn start
    # is far: the head stops at the first cut that parts no call from its result.
    first = [Message(role="user", content="the task " + "w " * 30)]
    for k in range(40):
        first += [
            Message(
                role="assistant",
                content="",
                tool_calls=(ToolCall(f"toolu_l{k:02d}", "read", {"k": k}),),
            ),
            Message(role="tool", content=f"out {k} " + "x " * 30, tool_call_id=f"toolu_l{k:02d}"),
        ]
    msgs = numbered([*first, *agent_chat(3, start=2)])
    window = compacted(msgs, Numbered())
    assert window.head == msgs[:5] and window.head[-1].role == "tool"
    body = build_request("anthropic", parts_of(window, "user"))
    validate(body)


def test_spec004_sandwich_head_messages_survive_as_messages_anthropic():
    msgs = numbered(agent_chat(6))
    window = compacted(msgs, Numbered())
    body = build_request("anthropic", parts_of(window, "system"))
    validate(body)
    sent = body["messages"]
    # The head, exactly as posted: the task first, the call and its result paired.
    assert sent[0]["role"] == "user" and blocks(sent[0])[0]["text"] == msgs[0].content
    assert sent[1]["role"] == "assistant"
    use = [b for b in blocks(sent[1]) if b["type"] == "tool_use"]
    assert use == [
        {"type": "tool_use", "id": "toolu_001", "name": "read", "input": {"path": "f1.py"}}
    ]
    result = [b for b in blocks(sent[2]) if b["type"] == "tool_result"]
    assert result and result[0]["tool_use_id"] == "toolu_001"
    # The summary is in the system prompt, nowhere in the messages, and nothing is quoted.
    assert SUMMARY.format(with_search_hint("summary 1")) in [b["text"] for b in body["system"]]
    text = json.dumps(sent)
    assert "summary 1" not in text and "[Start of the conversation" not in text
    assert "[Retained context" not in text
    # Head, then tail: the tail's last answer is last.
    assert msgs[-1].content.rstrip() in json.dumps(sent[-1])


def test_spec004_sandwich_head_messages_survive_as_messages_openai():
    msgs = numbered(agent_chat(6))
    window = compacted(msgs, Numbered())
    body = build_request("openai", parts_of(window, "system"))
    validate_chat(body)
    sent = body["messages"]
    assert sent[0] == {"role": "system", "content": "You are an agent."}
    head = sent[1 : 1 + len(window.head)]
    assert [m["role"] for m in head] == [m.role for m in window.head]
    assert head[1]["tool_calls"][0]["id"] == "toolu_001"
    assert head[2] == {
        "role": "tool",
        "tool_call_id": "toolu_001",
        "content": "contents of f1.py",
    } or (head[2]["role"] == "tool" and head[2]["tool_call_id"] == "toolu_001")
    # the sandwich's layout (docs/concepts/context-build.md#head-layout): top, the summary as a
    # system message, bottom.
    assert sent[1 + len(window.head)] == {
        "role": "system",
        "content": SUMMARY.format(with_search_hint("summary 1")),
    }
    assert sent[2 + len(window.head)]["content"] == msgs[-5].content


def test_spec004_sandwich_head_messages_survive_as_messages_responses():
    msgs = numbered(agent_chat(6))
    window = compacted(msgs, Numbered())
    body = build_request("responses", parts_of(window, "system"))
    validate_responses(body, set())
    items = body["input"]
    text = json.dumps(items)
    # The head first (the task, then its call and output), the summary in the instructions.
    assert text.index("task 1 ") < text.index("toolu_001") < text.index(msgs[-5].content.strip())
    assert "summary 1" in json.dumps(body.get("instructions")) + json.dumps(
        [i for i in items if i.get("role") in ("system", "developer")]
    )


def test_spec004_sandwich_user_role_summary_goes_between_head_and_tail():
    msgs = numbered(agent_chat(6))
    window = compacted(msgs, Numbered())
    for fmt in ("anthropic", "openai"):
        body = build_request(fmt, parts_of(window, "user"))
        (validate if fmt == "anthropic" else validate_chat)(body)
        text = json.dumps(body["messages"])
        at_head = text.index(json.dumps(msgs[3].content)[1:-1])
        at_summary = text.index("[Summary of the earlier conversation]")
        at_tail = text.index(json.dumps(msgs[-5].content)[1:-1])
        assert at_head < at_summary < at_tail, fmt


def test_spec004_sandwich_head_count_of_bisects_by_seq():
    msgs = numbered(agent_chat(3))
    live = [*msgs[:4], *msgs[9:]]
    assert head_count_of(live, 4) == 4
    assert head_count_of(live, 0) == 0
    assert head_count_of([], 4) == 0


# --- repeated compaction -------------------------------------------------------------------------


def test_spec004_sandwich_repeated_compaction_keeps_the_head_and_merges_summaries():
    summarizer = Numbered()
    msgs = numbered(agent_chat(6))
    ctx = StrategyContext(
        counter=COUNTER, summarizer=summarizer, force=True, transcript=lambda: list(msgs)
    )
    first = sandwich(Window(list(msgs)), ctx)
    more = numbered(agent_chat(4, start=7), start=len(msgs) + 1)
    # The next run sees the live window (head + tail + what came since) and the transcript.
    window = Window(
        [*first.window.messages, *more], summary=first.window.summary, head=first.window.head
    )
    ctx2 = StrategyContext(
        counter=COUNTER,
        summarizer=summarizer,
        force=True,
        sandwich_state=first.sandwich_state,
        transcript=lambda: [*msgs, *more],
    )
    second = sandwich(window, ctx2)
    assert second.report.applied
    assert second.window.head == first.window.head == msgs[:8]
    assert second.window.messages == more[-5:]
    # Incremental: the first summary is merged with the newly compressed messages.
    prompt = summarizer.requests[-1].prompt
    assert "summary 1" in prompt and "task 1 " not in prompt
    assert second.window.summary == "summary 2"
    assert second.sandwich_state.summary_range[0] == first.sandwich_state.summary_range[0] == 8


def test_spec004_sandwich_other_strategies_keep_the_head():
    msgs = numbered(agent_chat(6))
    window = compacted(msgs, Numbered())
    window.messages = [*window.messages, *numbered(agent_chat(4, start=7), start=25)]
    ctx = StrategyContext(counter=COUNTER, summarizer=Numbered(), force=True)
    result = run_chain(window, ("summarize", "drop_oldest_turns"), ctx)
    assert result.changed
    assert result.window.head == msgs[:8]
    assert result.result.after_msg_count >= len(msgs[:8])


# --- well-formedness for any transcript -----------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    msgs=transcripts(max_messages=24),
    top=st.integers(0, 6),
    bottom=st.integers(0, 6),
    role=st.sampled_from(["system", "user"]),
    tools=st.booleans(),
    final=st.sampled_from([None, "Finish now."]),
)
def test_spec004_sandwich_layout_is_well_formed_for_any_transcript(
    msgs, top, bottom, role, tools, final
):
    numbered(msgs)
    strategy = SandwichStrategy(counter=COUNTER, preserve_top=top, preserve_bottom=bottom)
    top_end, bottom_start = strategy.ranges(msgs)
    if bottom_start <= top_end:
        return  # nothing to compress: no sandwich
    window = Window(msgs[bottom_start:], summary="We fixed the parser.", head=msgs[:top_end])
    parts = parts_of(window, role, final_instruction=final)
    if not tools:
        parts.tools = []
    # The fake Messages server's checks, strict alternation, Chat Completions
    # rules, every tool output of head and tail sent (the assembler's property).
    check_bodies(parts, [*window.head, *window.messages])
    if parts.messages and role == "system":
        assert "We fixed the parser." not in json.dumps(
            build_request("anthropic", parts)["messages"]
        )


# --- the emergency path (docs/concepts/compaction.md#emergency) with a head -----------------------


def test_spec004_sandwich_overflow_drops_a_head_that_cannot_fit():
    msgs = numbered(agent_chat(6))
    window = compacted(msgs, Numbered())
    head_tokens = COUNTER.messages(window.head)
    limit = head_tokens + 40  # the head alone takes nearly all of it
    ctx = StrategyContext(
        counter=COUNTER,
        force=True,
        reason="overflow",
        target_tokens=limit // 2,
        max_context_tokens=limit,
        limit_tokens=limit,
    )
    out = run_chain(window, ("drop_oldest_turns",), ctx)
    assert out.changed and out.window.head == []
    assert out.window.tokens(COUNTER) < window.tokens(COUNTER)


def test_spec004_sandwich_overflow_keeps_a_small_head_and_counts_it():
    msgs = numbered(agent_chat(6))
    window = compacted(msgs, Numbered())
    window.messages = [*window.messages, *numbered(agent_chat(6, start=7), start=25)]
    limit = window.tokens(COUNTER) // 2
    ctx = StrategyContext(
        counter=COUNTER,
        force=True,
        reason="overflow",
        target_tokens=limit // 2,
        max_context_tokens=limit,
        limit_tokens=limit,
    )
    out = run_chain(window, ("drop_oldest_turns",), ctx)
    assert out.changed and out.window.head == window.head
    # The head's tokens are part of the budget: the result is under the limit.
    assert out.window.tokens(COUNTER) <= limit
