"""Compaction strategies (docs/concepts/compaction.md#chain).

Pure engine tests: no database. The sandwich's test ids are in the names
(CX-T1..T8, CX-NT1..NT3); the property tests at the end check the invariants
every strategy keeps over random conversations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextsvc.engine.budget import usage_note
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.strategies.base import (
    CompactionConfig,
    ContextState,
    StrategyContext,
    TokenCounter,
    Window,
)
from contextsvc.engine.strategies.chain import DEFAULT_CHAIN, run_chain
from contextsvc.engine.strategies.clearing import tool_clearing
from contextsvc.engine.strategies.cuts import open_call_floor
from contextsvc.engine.strategies.dropping import drop_oldest_turns
from contextsvc.engine.strategies.sandwich import SandwichStrategy, sandwich
from contextsvc.engine.strategies.summary import fit_summary_input, summarize
from contextsvc.engine.summarize import (
    PromptConfig,
    SummarizerError,
    SummaryRequest,
    SummaryResult,
    strip_trailing_tool_calls,
)
from contextsvc.engine.tokens import approx_tokens, get_tokenizer

COUNTER = TokenCounter(get_tokenizer())


# --- builders ---------------------------------------------------------------------


def user(text: str = "please do the thing") -> Message:
    return Message(role="user", content=text)


def say(text: str = "done") -> Message:
    return Message(role="assistant", content=text)


def call(*ids: str, text: str = "", name: str = "bash", args: dict | None = None) -> Message:
    return Message(
        role="assistant",
        content=text,
        tool_calls=tuple(
            ToolCall(id=i, name=name, arguments=args or {"command": f"run {i}"}) for i in ids
        ),
    )


def result(
    call_id: str, text: str = "output", *, name: str = "bash", ref: str | None = None
) -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, name=name, output_ref=ref)


def numbered(messages: list[Message]) -> list[Message]:
    """Give messages seqs and stored token counts, as the store does."""
    for i, msg in enumerate(messages, start=1):
        msg.seq = i
        msg.token_count = COUNTER.message(msg)
    return messages


BIG = "line of tool output that is long enough to matter\n" * 60


def agent_session(turns: int = 4, calls_per_turn: int = 3) -> list[Message]:
    msgs: list[Message] = []
    for t in range(turns):
        msgs.append(user(f"Turn {t}: fix src/pkg/mod{t}.py and you must keep the API stable."))
        for k in range(calls_per_turn):
            cid = f"t{t}c{k}"
            msgs.append(call(cid, text="I'll check." if k == 0 else ""))
            msgs.append(result(cid, f"ValueError: bad value {t}.{k}\n" + BIG, ref=f"ref_{cid}"))
        msgs.append(say(f"Turn {t} finished: the fix is a guard in mod{t}."))
    return numbered(msgs)


@dataclass
class FakeSummarizer:
    """Answers a fixed text and keeps the requests."""

    text: str = "<retain>\n- keep src/pkg/mod0.py\n</retain>\n<summary>\nShort summary.\n</summary>"
    name: str = "fake"
    requests: list[SummaryRequest] = field(default_factory=list)

    def complete(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        text = "Middle summary." if request.kind == "compress" else self.text
        return SummaryResult(text=text, model=request.model or "fake", summarizer=self.name)


class FailingSummarizer:
    name = "failing"

    def complete(self, request: SummaryRequest) -> SummaryResult:
        raise SummarizerError("model overloaded", transient=True, status=529)


def ctx(**kw) -> StrategyContext:
    kw.setdefault("counter", COUNTER)
    kw.setdefault("summarizer", FakeSummarizer())
    return StrategyContext(**kw)


def unanswered_calls(messages: list[Message]) -> set[str]:
    """Call ids in ``messages`` with no result in ``messages`` (counted independently
    of ``engine.pairing``, so it can check it)."""
    pending: dict[str, int] = {}
    for msg in messages:
        if msg.role == "assistant":
            for c in msg.tool_calls:
                pending[c.id] = pending.get(c.id, 0) + 1
        elif msg.role == "tool" and msg.tool_call_id in pending:
            pending[msg.tool_call_id] -= 1
            if not pending[msg.tool_call_id]:
                del pending[msg.tool_call_id]
    return set(pending)


def pairs_ok(messages: list[Message]) -> bool:
    """Every tool result has its call earlier in the list."""
    seen: set[str] = set()
    for msg in messages:
        if msg.role == "assistant":
            seen.update(c.id for c in msg.tool_calls)
        elif msg.role == "tool" and msg.tool_call_id not in seen:
            return False
    return True


# --- tool clearing ------------------------------------------------------------------


def test_tool_clearing_keeps_recent_tool_uses_and_leaves_refs():
    window = Window(agent_session())
    out = tool_clearing(window, ctx(force=True, config=CompactionConfig(keep_tool_uses=3)))
    tools = [m for m in out.window.messages if m.role == "tool"]
    assert [m.view_state for m in tools[-3:]] == ["full"] * 3
    assert all(
        m.view == f"[tool output cleared; ref={m.output_ref}; was {len(m.text.encode()):,} bytes]"
        for m in tools[:-3]
    )
    assert out.report.applied and out.report.after_tokens < out.report.before_tokens
    assert out.report.details["cleared"] == len(tools) - 3


def test_tool_clearing_excludes_tools():
    msgs = numbered(
        [
            user(),
            call("a", name="read"),
            result("a", BIG, name="read"),
            call("b"),
            result("b", BIG),
            call("c"),
            result("c", "x"),
        ]
    )
    cfg = CompactionConfig(keep_tool_uses=1, exclude_tools=frozenset({"read"}))
    out = tool_clearing(Window(msgs), ctx(force=True, config=cfg))
    by_id = {m.tool_call_id: m for m in out.window.messages if m.role == "tool"}
    assert by_id["a"].view_state == "full"  # excluded
    assert by_id["b"].view_state == "cleared"
    assert by_id["c"].view_state == "full"  # the most recent


def test_tool_clearing_clear_at_least_clears_nothing_when_too_little_to_free():
    msgs = numbered([user(), call("a"), result("a", BIG), call("b"), result("b", "short")])
    cfg = CompactionConfig(keep_tool_uses=1, clear_at_least=100_000)
    out = tool_clearing(Window(msgs), ctx(force=True, config=cfg))
    assert not out.report.applied
    assert out.window.messages == msgs
    assert "clear_at_least" in out.report.details["skipped"]


def test_tool_clearing_unforced_stops_at_target_oldest_first():
    window = Window(agent_session())
    total = window.tokens(COUNTER)
    target = total - 1000  # one cleared output is enough
    out = tool_clearing(
        window, ctx(target_tokens=target, config=CompactionConfig(keep_tool_uses=0))
    )
    assert out.report.details["cleared"] == 2  # ~550 tokens each
    assert out.window.messages[2].view_state == "cleared"  # the oldest went first
    assert out.report.after_tokens <= target


def test_tool_clearing_unforced_clears_at_least_clear_at_least():
    window = Window(agent_session())
    total = window.tokens(COUNTER)
    cfg = CompactionConfig(keep_tool_uses=0, clear_at_least=3000)
    out = tool_clearing(window, ctx(target_tokens=total - 100, config=cfg))
    assert out.report.details["freed_tokens"] >= 3000


def test_tool_clearing_can_clear_inputs_too():
    msgs = numbered(
        [
            user(),
            call("a", args={"path": "/x" * 200}),
            result("a", BIG),
            call("b"),
            result("b", "x"),
        ]
    )
    cfg = CompactionConfig(keep_tool_uses=1, clear_tool_inputs=True)
    out = tool_clearing(Window(msgs), ctx(force=True, config=cfg))
    cleared_call = out.window.messages[1]
    assert cleared_call.tool_calls[0].arguments == {} and cleared_call.view_state == "cleared"
    assert out.window.messages[3].tool_calls[0].arguments  # its result is kept: inputs kept
    assert out.report.details["cleared_inputs"] == 1


def test_tool_clearing_inputs_follow_the_result_that_answers_the_call():
    # A legacy transcript reusing an id: only the call whose own result was
    # cleared loses its inputs (engine.pairing), not every call with that id.
    msgs = numbered([user(), call("a"), result("a", BIG), call("a"), result("a", BIG)])
    cfg = CompactionConfig(keep_tool_uses=1, clear_tool_inputs=True)
    out = tool_clearing(Window(msgs), ctx(force=True, config=cfg))
    assert out.window.messages[1].tool_calls[0].arguments == {}
    assert out.window.messages[3].tool_calls[0].arguments  # its result is kept: inputs kept
    assert out.report.details["cleared_inputs"] == 1


def test_tool_clearing_skips_trimmed_and_cleared_outputs():
    msgs = numbered([user(), call("a"), result("a", BIG), call("b"), result("b", BIG)])
    msgs[2].view, msgs[2].view_state = "[tool output trimmed; ref=r]", "trimmed"
    msgs[2].token_count = COUNTER.recount(msgs[2]).token_count
    out = tool_clearing(Window(msgs), ctx(force=True, config=CompactionConfig(keep_tool_uses=0)))
    assert out.window.messages[2].view_state == "trimmed"
    assert out.window.messages[4].view_state == "cleared"


# --- retain + summary (docs/concepts/compaction.md#retain-summary) --------------------------------


def test_summarize_keeps_last_turn_and_sets_retain_and_summary_spec000_2_7():
    msgs = agent_session(turns=3)
    fake = FakeSummarizer()
    # The summariser's retain (docs/concepts/compaction.md#retain-summary), with the task not pinned
    # in the retain slot.
    cfg = CompactionConfig(pin_task=False)
    out = summarize(Window(msgs), ctx(summarizer=fake, force=True, config=cfg))
    last_turn = msgs[-8:]  # user + 3 × (call, result) + say
    assert out.window.messages == last_turn
    assert out.window.retain == "- keep src/pkg/mod0.py"
    assert out.window.summary == "Short summary."
    pre = out.window.preamble()
    assert [m.role for m in pre] == ["user", "user"]  # retain first, then summary
    assert pre[0].text.startswith("[Retained context") and pre[1].text.startswith("[Summary")


def test_summarize_retain_last_turns_n():
    msgs = agent_session(turns=4)
    out = summarize(Window(msgs), ctx(force=True, config=CompactionConfig(retain_last_turns=2)))
    assert out.window.messages == msgs[-16:]


def test_summary_request_has_interrupt_with_directives_and_no_tool_blocks_spec000_2_6():
    msgs = agent_session(turns=2)
    fake = FakeSummarizer()
    prompts = PromptConfig(
        summary_directives=("Keep every file path",),
        retain_directives=("List refs",),
        instructions="Focus on the parser",
    )
    cfg = CompactionConfig(prompts=prompts, model="claude-haiku-4-5")
    summarize(Window(msgs), ctx(summarizer=fake, force=True, config=cfg))
    (request,) = fake.requests
    assert request.model == "claude-haiku-4-5"
    assert "<summary>" in request.prompt and "<retain>" in request.prompt
    assert "- Keep every file path" in request.prompt and "- List refs" in request.prompt
    assert "- Focus on the parser" in request.prompt
    body = request.anthropic_body()
    assert "tools" not in body
    assert body["messages"][0]["role"] == "user"
    assert body["messages"][-1]["content"][-1]["text"] == request.prompt  # the interrupt is last
    blocks = [b["type"] for m in body["messages"] for b in m["content"]]
    assert set(blocks) == {"text"}  # calls and results rendered as text


def test_strip_trailing_tool_calls_keeps_content_only_spec000_2_6_1():
    msgs = [user(), call("a", text="Let me look.")]
    out = strip_trailing_tool_calls(msgs)
    assert (
        out[-1].role == "assistant" and out[-1].tool_calls == () and out[-1].text == "Let me look."
    )


def test_strip_trailing_tool_calls_drops_message_without_content_spec000_2_6_1():
    msgs = [user(), say("ok"), call("a")]
    assert strip_trailing_tool_calls(msgs) == msgs[:2]
    assert strip_trailing_tool_calls(msgs[:2]) == msgs[:2]  # nothing to strip


def test_summarize_never_cuts_past_a_call_waiting_for_its_result():
    msgs = numbered(
        [user("a"), say(BIG), user("b"), say(BIG), user("c"), call("open", text="running")]
    )
    assert open_call_floor(msgs) == 5
    out = summarize(Window(msgs), ctx(force=True, config=CompactionConfig(retain_last_turns=0)))
    # retain_last_turns=0 would summarise everything, but the open call stays
    # live for its result: the cut snaps back to its turn's start.
    assert out.report.applied and out.window.messages == msgs[4:]
    assert pairs_ok(out.window.messages)


def test_summarize_folds_the_previous_summary_in_when_not_incremental():
    msgs = agent_session(turns=2)
    fake = FakeSummarizer()
    cfg = CompactionConfig(incremental_summary=False)
    summarize(
        Window(msgs, retain="- old fact", summary="Old summary."),
        ctx(summarizer=fake, force=True, config=cfg),
    )
    source_text = "\n".join(m.text for m in fake.requests[0].source)
    assert "Old summary." in source_text and "- old fact" in source_text


def test_issue16_rule11_second_compaction_merges_retained_facts_without_resending_memory():
    """A second compaction merges the retained facts with the first one's instead
    of replacing them, and does not send the earlier compaction's memory to the
    summariser again: it summarises only what left the window since."""
    first = FakeSummarizer(
        text="<retain>\n- keep src/pkg/mod0.py\n</retain>\n<summary>\nFirst part.\n</summary>"
    )
    cfg = CompactionConfig(pin_task=False)
    msgs = agent_session(turns=4)
    one = summarize(Window(msgs[:20]), ctx(summarizer=first, force=True, config=cfg)).window
    assert one.retain == "- keep src/pkg/mod0.py" and one.summary == "First part."
    second = FakeSummarizer(
        text="<retain>\n- keep src/pkg/mod0.py\n- keep src/pkg/mod2.py\n</retain>\n"
        "<summary>\nSecond part.\n</summary>"
    )
    live = one.messages + msgs[20:]
    two = summarize(
        Window(live, one.retain, one.summary), ctx(summarizer=second, force=True, config=cfg)
    )
    sent = "\n".join(m.text for m in second.requests[0].llm_messages())
    assert "First part." not in sent and "- keep src/pkg/mod0.py" not in sent
    assert one.messages[0].text in sent  # what left the window since is what it reads
    window = two.window
    # Both compactions' facts, each once, the earlier first; both summaries, in order.
    assert window.retain == "- keep src/pkg/mod0.py\n- keep src/pkg/mod2.py"
    assert window.summary.index("First part.") < window.summary.index("Second part.")
    assert two.report.details["incremental"] is True


def test_incremental_memory_stays_bounded_by_clipping_the_oldest_part():
    cfg = CompactionConfig(pin_task=False, summary_max_tokens=128)
    window = Window(agent_session(turns=4))
    for k in range(6):
        fake = FakeSummarizer(text=f"<summary>\nPart {k}.\n" + f"line {k}\n" * 40 + "</summary>")
        out = summarize(window, ctx(summarizer=fake, force=True, config=cfg)).window
        window = Window(out.messages + agent_session(turns=1), out.retain, out.summary)
    # About one summary's worth (3.5 characters a token): the newest part whole,
    # the one before it clipped from its end, the older ones gone.
    assert len(window.summary) <= 128 * 4
    assert "Part 5.\n" + "line 5\n" * 39 + "line 5" in window.summary
    assert "Part 4." in window.summary and "Part 0." not in window.summary


def test_summarize_failure_raises_service_unavailable_error_cx_nt3():
    with pytest.raises(SummarizerError) as err:
        summarize(Window(agent_session()), ctx(summarizer=FailingSummarizer(), force=True))
    assert err.value.transient


def test_summarize_without_summary_text_is_an_error():
    fake = FakeSummarizer(text="   ")
    with pytest.raises(SummarizerError):
        summarize(Window(agent_session()), ctx(summarizer=fake, force=True))


def test_summarize_missing_tags_uses_whole_text():
    fake = FakeSummarizer(text="Plain summary without tags")
    cfg = CompactionConfig(pin_task=False)
    out = summarize(Window(agent_session()), ctx(summarizer=fake, force=True, config=cfg))
    assert out.window.summary == "Plain summary without tags" and out.window.retain == ""


def test_summarize_with_nothing_before_the_kept_turn_is_a_no_op():
    msgs = numbered([user(), say()])
    out = summarize(Window(msgs), ctx(force=True))
    assert not out.report.applied and out.window.messages == msgs


def test_summary_input_is_capped():
    msgs = agent_session(turns=4)
    fake = FakeSummarizer()
    cfg = CompactionConfig(summary_input_tokens=1500)
    out = summarize(Window(msgs), ctx(summarizer=fake, force=True, config=cfg))
    assert COUNTER.messages(list(fake.requests[0].source)) <= 1500 + 50
    assert out.report.details.get("omitted_outputs")


# --- drop oldest turns (docs/concepts/context-build.md#turns) -------------------------------------


def test_drop_oldest_turns_drops_half_at_a_turn_boundary_spec003():
    msgs = agent_session(turns=4)
    out = drop_oldest_turns(Window(msgs), ctx(reason="overflow"))
    assert out.window.messages == msgs[16:]  # two of four turns
    assert out.report.details["dropped_turns"] == 2
    # The compression note goes into the summary, not into the history.
    assert "provider reported the context too long" in out.window.summary
    assert all("Context compressed" not in m.text for m in out.window.messages)


def test_drop_oldest_turns_single_turn_falls_back_to_last_user_message_spec003():
    msgs = numbered([user("read the huge log"), call("a"), result("a", BIG * 20, ref="ref_a")])
    out = drop_oldest_turns(Window(msgs), ctx(reason="overflow"))
    kept = out.window.messages
    assert kept[0] == msgs[0]  # the user message, intact
    # The newest output is cut to head + tail, never cleared (an agent that
    # finds its newest result gone repeats the call).
    assert kept[2].view_state == "cut" and "tool_output_cache ref=ref_a" in kept[2].view
    assert kept[2].view.startswith(BIG[:100]) and kept[2].view.endswith(BIG[-100:])
    assert pairs_ok(kept)
    assert out.report.details["fallback"] and out.report.after_tokens < out.report.before_tokens


def test_drop_oldest_turns_truncates_a_single_huge_user_message():
    msgs = numbered([user("x " * 50_000)])
    out = drop_oldest_turns(Window(msgs), ctx(target_tokens=2000, reason="overflow"))
    assert out.window.messages[0].view_state == "cut"
    assert out.report.after_tokens < 2000


# --- sandwich (docs/concepts/compaction.md#sandwich) ----------------------------------------------


def chat(n: int, size: int = 40) -> list[Message]:
    msgs = [
        user(f"question {i} " + "w " * size) if i % 2 == 0 else say(f"answer {i} " + "w " * size)
        for i in range(n)
    ]
    return numbered(msgs)


def strategy(**kw) -> SandwichStrategy:
    return SandwichStrategy(counter=COUNTER, **kw)


def test_cx_t1_under_threshold_returns_full_history():
    msgs = chat(20)
    fake = FakeSummarizer()
    res = strategy().build_context(msgs, None, 1_000_000, summarizer=fake)
    assert res.messages == msgs and not res.summary_used and res.new_state is None
    assert fake.requests == []


def test_cx_t2_over_threshold_triggers_compression():
    msgs = chat(20)
    fake = FakeSummarizer()
    res = strategy().build_context(msgs, None, 1000, summarizer=fake)
    assert res.summary_used and len(fake.requests) == 1
    # The top grows from 5 to the next turn start (6): whole turns in the head.
    assert res.new_state == ContextState("sandwich", "Middle summary.", (6, 15))
    assert res.tokens_used < COUNTER.messages(msgs)


def test_cx_t3_top_5_messages_always_preserved():
    msgs = chat(30)
    res = strategy().build_context(msgs, None, 1000, summarizer=FakeSummarizer())
    assert res.messages[:5] == msgs[:5]


def test_cx_t4_bottom_5_messages_always_preserved():
    msgs = chat(30)
    res = strategy().build_context(msgs, None, 1000, summarizer=FakeSummarizer())
    assert res.messages[-5:] == msgs[-5:]


def test_cx_t3_t4_snap_to_keep_tool_pairs_together():
    msgs = numbered(
        [
            user(),
            say(),
            user(),
            say(),
            call("a"),
            result("a"),
            user(),
            say(),
            say(),
            user(),
            call("b"),
            result("b"),
            say(),
            user(),
            say(),
        ]
        + chat(4)
    )
    res = strategy().build_context(msgs, None, 10, summarizer=FakeSummarizer())
    assert res.top_end == 6  # 5 would split call a from its result
    assert res.messages[:6] == msgs[:6] and pairs_ok(res.messages)


def test_cx_t5_cached_summary_reused_when_valid():
    msgs = chat(20)
    state = ContextState("sandwich", "Cached.", (6, 15))
    fake = FakeSummarizer()
    res = strategy().build_context(msgs, state, 1000, summarizer=fake)
    assert fake.requests == []  # no model call
    assert res.summary_used and res.new_state is None
    assert res.messages[6].text == "[Earlier conversation summary: Cached.]"


def test_cx_t6_cache_invalidated_when_middle_grows():
    msgs = chat(24)  # 4 more messages: the middle is now [6, 19)
    state = ContextState("sandwich", "Cached.", (6, 15))
    fake = FakeSummarizer()
    s = strategy()
    assert not s.is_valid(state, msgs)
    res = s.build_context(msgs, state, 1000, summarizer=fake)
    assert len(fake.requests) == 1
    assert res.new_state is not None and res.new_state.summary_range == (6, 19)


def test_cx_t6_incremental_recompression_sends_only_new_messages():
    msgs = chat(24)
    state = ContextState("sandwich", "Cached.", (6, 15))
    fake = FakeSummarizer()
    strategy(incremental=True).build_context(msgs, state, 1000, summarizer=fake)
    source = fake.requests[0].source
    assert source[0].text == "[Earlier conversation summary: Cached.]"
    assert list(source[1:]) == msgs[15:19]


def test_cx_t7_summary_placed_after_top_as_earlier_conversation_summary():
    msgs = chat(20)
    res = strategy().build_context(msgs, None, 1000, summarizer=FakeSummarizer())
    summary_msg = res.messages[6]  # after the top (5, grown to the turn start)
    # the sandwich's system message (docs/concepts/context-build.md#summary-placement); histories
    # carry no system role (docs/concepts/context-build.md#turns), so it travels in the summary
    # slot, rendered as a user message.
    assert summary_msg.text == "[Earlier conversation summary: Middle summary.]"
    assert len(res.messages) == 12


def test_cx_t8_token_estimation_reasonable_accuracy():
    tokenizer = get_tokenizer()
    text = "The quick brown fox jumps over the lazy dog while the compiler reports an error. " * 50
    msgs = [user(text), say(text)]
    estimate = strategy().estimate(msgs)
    exact = sum(tokenizer.count(m.text) for m in msgs)
    assert exact <= estimate <= exact * 1.3 + 20
    # docs/concepts/context-build.md#token-estimate: ~4 chars per token
    assert estimate >= sum(approx_tokens(m.text) for m in msgs)


def test_cx_nt1_zero_max_context_tokens_is_validation_error():
    with pytest.raises(EngineValidationError, match="Context limit must be positive"):
        strategy().build_context(chat(20), None, 0, summarizer=FakeSummarizer())
    with pytest.raises(EngineValidationError):
        strategy().needs_compression(chat(20), -5)


def test_cx_nt2_compress_with_empty_messages_is_validation_error():
    fake = FakeSummarizer()
    with pytest.raises(EngineValidationError, match="Conversation has no messages"):
        strategy().compress([], fake)
    assert fake.requests == []  # no summary created


def test_cx_nt3_compression_model_failure_leaves_cached_state():
    msgs = chat(24)
    state = ContextState("sandwich", "Cached.", (5, 15))
    before = ContextState(
        **{k: getattr(state, k) for k in ("strategy", "summary", "summary_range")}
    )
    with pytest.raises(SummarizerError):
        strategy().build_context(msgs, state, 1000, summarizer=FailingSummarizer())
    assert state == before


def test_sandwich_needs_enough_messages():
    msgs = chat(10)
    res = strategy().build_context(msgs, None, 10, summarizer=FakeSummarizer())
    assert not res.summary_used  # 10 <= 5 + 5


def test_spec004_sandwich_window_strategy_keeps_top_as_head_messages_and_bottom_live():
    msgs = chat(20)
    out = sandwich(Window(msgs), ctx(max_context_tokens=1000))
    assert out.window.messages == msgs[15:]
    # The top survives as messages (the window's head), not quoted in the retain slot.
    assert out.window.head == msgs[:6]
    assert out.window.retain == "" and "question 0" not in out.window.retain
    assert out.window.summary == "Middle summary."
    assert out.state_changed and out.sandwich_state.summary_range == (6, 15)


# --- the chain ------------------------------------------------------------------------------


def test_chain_stops_once_under_target():
    window = Window(agent_session())
    total = window.tokens(COUNTER)
    fake = FakeSummarizer()
    res = run_chain(window, DEFAULT_CHAIN, ctx(summarizer=fake, target_tokens=total // 2))
    assert res.result.strategies_run == ["tool_clearing"]
    assert fake.requests == []
    assert res.result.after_tokens <= total // 2
    assert [r.name for r in res.reports] == ["tool_clearing", "summarize"]  # then stopped


def test_chain_under_target_does_nothing_unless_forced():
    window = Window(agent_session())
    res = run_chain(window, DEFAULT_CHAIN, ctx(target_tokens=10**9))
    assert not res.changed and res.window is window


def test_forced_chain_runs_fully_but_skips_emergency_under_target():
    window = Window(agent_session())
    res = run_chain(window, DEFAULT_CHAIN, ctx(target_tokens=10**9, force=True))
    assert res.result.strategies_run == ["tool_clearing", "summarize"]
    assert res.reports[-1].details["skipped"] == "under the target"


def test_forced_single_emergency_strategy_runs():
    res = run_chain(
        Window(agent_session()), ["drop_oldest_turns"], ctx(target_tokens=10**9, force=True)
    )
    assert res.result.strategies_run == ["drop_oldest_turns"]


def test_chain_reports_before_and_after_compact_result_spec002_7():
    window = Window(agent_session())
    res = run_chain(window, DEFAULT_CHAIN, ctx(force=True))
    d = res.result.to_dict()
    assert d["before_tokens"] == window.tokens(COUNTER) and d["after_tokens"] < d["before_tokens"]
    assert d["before_msg_count"] == 32 and d["after_msg_count"] < 32
    assert set(d) == {
        "before_tokens",
        "after_tokens",
        "before_msg_count",
        "after_msg_count",
        "strategies_run",
    }


def test_chain_clears_cached_sandwich_state_when_another_strategy_applies():
    state = ContextState("sandwich", "Cached.", (5, 15))
    res = run_chain(Window(agent_session()), ["summarize"], ctx(force=True, sandwich_state=state))
    assert res.state_changed and res.sandwich_state is None


def test_unknown_strategy_is_validation_error():
    with pytest.raises(EngineValidationError):
        run_chain(Window(agent_session()), ["magic"], ctx())


def test_compaction_config_from_policy():
    cfg = CompactionConfig.from_policy(
        {
            "model": "claude-haiku",
            "retain_last_turns": 2,
            "exclude_tools": ["read"],
            "summary_directives": ["a"],
            "retain_prompt": "",
        },
        model="claude-sonnet",
        instructions="be brief",
    )
    assert cfg.model == "claude-haiku" and cfg.retain_last_turns == 2
    assert cfg.exclude_tools == {"read"} and cfg.prompts.instructions == "be brief"
    assert CompactionConfig.from_policy({}, model="m").model == "m"
    with pytest.raises(EngineValidationError):
        CompactionConfig(retain_last_turns=-1)


def test_usage_note_above_80_percent_spec002_7():
    assert usage_note(80, 100) is None
    assert usage_note(83, 100) == (
        "[Context: 83% used. You can call compact_context to free space before continuing with"
        " large operations.]"
    )


def test_offline_summarizer_is_deterministic_and_keeps_key_facts():
    msgs = agent_session(turns=3)
    request = SummaryRequest(
        kind="retain_summary", source=tuple(msgs), prompt="p", model="", max_tokens=4096
    )
    one = OfflineSummarizer().complete(request).text
    two = OfflineSummarizer().complete(request).text
    assert one == two
    for fact in (
        "src/pkg/mod0.py",
        "must keep the API stable",
        "ValueError: bad value 0.0",
        "ref_t0c0",
        "the fix is a guard",
    ):
        assert fact in one


# --- properties --------------------------------------------------------------------------------


@st.composite
def conversations(draw) -> list[Message]:
    """Random agent conversations: tool-calling turns, maybe an open call at the end."""
    msgs: list[Message] = []
    n_turns = draw(st.integers(1, 6))
    counter = 0
    for t in range(n_turns):
        msgs.append(user(f"request {t} " + "u" * draw(st.integers(0, 300))))
        for _ in range(draw(st.integers(0, 4))):
            ids = []
            for _ in range(draw(st.integers(1, 2))):
                counter += 1
                ids.append(f"c{counter}")
            msgs.append(call(*ids, text=draw(st.sampled_from(["", "checking"]))))
            for i in ids:
                msgs.append(
                    result(
                        i,
                        "o" * draw(st.integers(0, 3000)),
                        ref=f"ref_{i}",
                        name=draw(st.sampled_from(["bash", "read"])),
                    )
                )
        if draw(st.booleans()):
            msgs.append(say("answer " + "a" * draw(st.integers(0, 400))))
    if draw(st.booleans()):
        counter += 1
        msgs.append(call(f"c{counter}", text="one more"))  # still waiting for its result
    return numbered(msgs)


def _check_invariants(before: Window, after: Window, *, open_ids: set[str]) -> None:
    msgs = after.messages
    assert pairs_ok(msgs), "a tool result lost its call"
    # A call still waiting for its result stays live.
    live_calls = {c.id for m in msgs if m.role == "assistant" for c in m.tool_calls}
    assert open_ids <= live_calls
    # Turn order: kept messages appear in their original order.
    seqs = [m.seq for m in msgs]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert after.tokens(COUNTER) <= before.tokens(COUNTER), "tokens grew"


STRATEGY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@STRATEGY_SETTINGS
@given(conversations(), st.integers(0, 3), st.booleans())
def test_property_summarize(msgs, keep_turns, force):
    window = Window(msgs)
    cfg = CompactionConfig(retain_last_turns=keep_turns)
    out = summarize(window, ctx(summarizer=OfflineSummarizer(), config=cfg, force=force))
    _check_invariants(
        window, out.window, open_ids=_open_in_last_turn(msgs) & unanswered_calls(msgs)
    )
    if out.report.applied and keep_turns:
        # The last N turns are byte-identical.
        from contextsvc.engine.turns import last_turns_start

        start = last_turns_start(msgs, keep_turns)
        assert out.window.messages[-(len(msgs) - start) :] == msgs[start:]


def _open_in_last_turn(msgs: list[Message]) -> set[str]:
    floor = open_call_floor(msgs)
    return {c.id for m in msgs[floor:] if m.role == "assistant" for c in m.tool_calls} & {
        c.id for m in msgs[floor : floor + 1] for c in m.tool_calls
    }


@STRATEGY_SETTINGS
@given(conversations(), st.integers(0, 4), st.booleans(), st.integers(0, 20_000))
def test_property_tool_clearing(msgs, keep, force, target):
    window = Window(msgs)
    out = tool_clearing(
        window, ctx(config=CompactionConfig(keep_tool_uses=keep), force=force, target_tokens=target)
    )
    _check_invariants(window, out.window, open_ids=_open_in_last_turn(msgs))
    assert len(out.window.messages) == len(msgs)
    tools_before = [m for m in msgs if m.role == "tool"]
    tools_after = [m for m in out.window.messages if m.role == "tool"]
    if keep:
        # The N most recent tool uses are byte-identical; user/assistant messages untouched.
        assert tools_after[-keep:] == tools_before[-keep:]
    assert [m for m in out.window.messages if m.role != "tool"] == [
        m for m in msgs if m.role != "tool"
    ]


@STRATEGY_SETTINGS
@given(conversations(), st.sampled_from(["budget", "overflow"]), st.integers(0, 5000))
def test_property_drop_oldest_turns(msgs, reason, target):
    window = Window(msgs)
    out = drop_oldest_turns(window, ctx(reason=reason, target_tokens=target))
    _check_invariants(window, out.window, open_ids=_open_in_last_turn(msgs))
    if out.report.applied and not out.report.details["fallback"]:
        # The last turn is byte-identical; only whole oldest turns went.
        from contextsvc.engine.turns import last_turns_start

        start = last_turns_start(msgs, 1)
        assert out.window.messages[-(len(msgs) - start) :] == msgs[start:]
        # The note goes into the summary, shortened or left out only when it
        # would cost more than what was dropped (the window must shrink).
        if out.report.details["note"] != "none":
            assert "Context compressed" in out.window.summary


@STRATEGY_SETTINGS
@given(conversations(), st.integers(0, 6), st.integers(0, 6))
def test_property_sandwich(msgs, top, bottom):
    window = Window(msgs)
    cfg = CompactionConfig(preserve_top=top, preserve_bottom=bottom)
    out = sandwich(window, ctx(config=cfg, force=True, max_context_tokens=1000))
    _check_invariants(window, out.window, open_ids=_open_in_last_turn(msgs))
    if out.report.applied:
        assert len(out.window.messages) >= min(bottom, len(msgs))
        assert out.window.messages == msgs[len(msgs) - len(out.window.messages) :]


@STRATEGY_SETTINGS
@given(conversations(), st.booleans(), st.integers(0, 30_000))
def test_property_default_chain(msgs, force, target):
    window = Window(msgs)
    res = run_chain(
        window,
        DEFAULT_CHAIN,
        ctx(summarizer=OfflineSummarizer(), force=force, target_tokens=target),
    )
    _check_invariants(window, res.window, open_ids=_open_in_last_turn(msgs))
    assert res.result.after_tokens <= res.result.before_tokens
    assert res.result.after_tokens == res.window.tokens(COUNTER)


# --- one long agentic turn -----------------------------------------------------------


def _agentic_single_turn(iterations: int) -> list[Message]:
    """One task, then tool iterations only: the shape of a SWE-agent run."""
    msgs = [user("fix the failing parser tests in src/parser.py")]
    for k in range(iterations):
        msgs.append(call(f"it{k}", text=f"step {k}: looking further"))
        msgs.append(result(f"it{k}", "output line\n" * 40))
    return numbered(msgs)


def test_summarize_splits_one_oversized_turn_at_an_iteration_boundary_spec003():
    msgs = _agentic_single_turn(40)
    window = Window(msgs)
    before = window.tokens(COUNTER)
    target = before // 4
    out = summarize(window, ctx(summarizer=OfflineSummarizer(), target_tokens=target))
    assert out.report.applied and out.report.details["split_turn"] is True
    kept = out.window.messages
    # A suffix of the transcript, starting at an assistant iteration, pairs intact.
    assert kept == msgs[len(msgs) - len(kept) :]
    assert kept[0].role == "assistant" and pairs_ok(kept)
    assert 0 < COUNTER.messages(kept) <= target // 2
    assert out.window.summary  # the earlier iterations (and the task) are summarised
    assert "src/parser.py" in out.window.summary + out.window.retain
    assert out.window.tokens(COUNTER) < before


def test_summarize_keeps_whole_turns_when_they_fit():
    msgs = numbered([*_agentic_single_turn(3), user("now the docs"), say("done")])
    out = summarize(Window(msgs), ctx(summarizer=OfflineSummarizer(), target_tokens=10_000_000))
    assert "split_turn" not in out.report.details


def test_summarize_cuts_at_a_turn_start_when_earlier_turns_exist_spec003():
    # The newest turn alone is over half the target: with whole turns before it
    # to summarise, the cut stays at its start (splitting is the one-turn resort).
    msgs = numbered([*_agentic_single_turn(20), say("done"), *_agentic_single_turn(40)])
    out = summarize(Window(msgs), ctx(summarizer=OfflineSummarizer(), target_tokens=400))
    kept = out.window.messages
    assert out.report.applied and "split_turn" not in out.report.details
    assert kept == msgs[42:] and kept[0].role == "user"


@STRATEGY_SETTINGS
@given(conversations(), st.integers(1, 3), st.integers(50, 5_000))
def test_property_summarize_with_a_target_keeps_a_safe_suffix(msgs, keep_turns, target):
    window = Window(msgs)
    cfg = CompactionConfig(retain_last_turns=keep_turns)
    out = summarize(window, ctx(summarizer=OfflineSummarizer(), config=cfg, target_tokens=target))
    _check_invariants(
        window, out.window, open_ids=_open_in_last_turn(msgs) & unanswered_calls(msgs)
    )
    if out.report.applied:
        kept = out.window.messages
        assert kept == msgs[len(msgs) - len(kept) :]  # byte-identical suffix


def test_summary_input_over_budget_keeps_the_task_and_marks_what_it_left_out():
    from contextsvc.engine.retention import extract_key_facts

    msgs = _agentic_single_turn(30)
    budget = COUNTER.messages(msgs) // 5
    out, stats = fit_summary_input(msgs, budget, COUNTER)
    assert out[0] is msgs[0]  # the task, first and untouched
    assert stats["omitted_messages"] > 0
    assert out[1].role == "user" and "omitted from this summary input" in out[1].text
    assert COUNTER.messages(out) <= budget + COUNTER.message(out[1])
    requests = [f.text for f in extract_key_facts(out) if f.kind == "request"]
    assert requests == ["fix the failing parser tests in src/parser.py"]
