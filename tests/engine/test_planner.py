"""The cost-aware planner, the pinned task and the cache-reusing summary request."""

from __future__ import annotations

from dataclasses import replace

from contextsvc.engine.build import ContextParts, sent_history
from contextsvc.engine.planner import PlannerInput, compaction_cost, decide, optimal_growth
from contextsvc.engine.strategies.base import CompactionConfig, Window
from contextsvc.engine.strategies.pinning import PINNED_MARK, is_pinned_retain
from contextsvc.engine.strategies.summary import summarize
from tests.engine.test_strategies import COUNTER, FakeSummarizer, agent_session, ctx

BASE = PlannerInput(
    used=10_000,
    limit=28_000,
    fixed=1_000,
    floor=7_000,
    per_call=500,
    summary_tokens=1_000,
    ceiling=26_600,
)


def test_a_compaction_waits_until_it_pays_for_itself():
    early = decide(replace(BASE, used=8_000))
    assert not early.compact and early.trigger > 8_000
    late = decide(replace(BASE, used=early.trigger + 2_000))
    assert late.compact and late.expected_calls > 10 and late.trigger < BASE.ceiling


def test_the_guard_threshold_always_compacts():
    assert decide(replace(BASE, used=26_600, per_call=50_000)).compact


def test_a_cheaper_compaction_triggers_sooner():
    # A cached summary call (input at 0.1) costs less, so the cycle is shorter.
    cached = decide(replace(BASE, used=8_000))
    fresh = decide(replace(BASE, used=8_000, cached_summary=False))
    assert cached.cost < fresh.cost and cached.trigger < fresh.trigger


def test_the_trigger_minimises_cost_per_appended_token():
    cost = compaction_cost(
        summary_input=9_000, summary_tokens=1_000, rewritten=6_000, cached_summary=True
    )
    best = optimal_growth(cost, 500)

    def per_token(growth: float) -> float:
        reads = 0.1 * (2 * 7_000 + growth) / (2 * 500)
        return reads + cost / growth

    assert per_token(best) < per_token(best * 0.7) and per_token(best) < per_token(best * 1.4)


def test_summarize_pins_the_task_verbatim_above_the_summary():
    msgs = agent_session(turns=3)
    fake = FakeSummarizer()
    out = summarize(Window(msgs), ctx(summarizer=fake, force=True))
    task = msgs[0].text
    assert is_pinned_retain(out.window.retain) and task in out.window.retain
    # The summariser's own retain went into the summary, the task was not sent to it.
    assert out.window.summary.startswith("[Retained facts]\n- keep src/pkg/mod0.py")
    assert all(m.text != task for m in fake.requests[0].source)


def test_a_later_compaction_leaves_the_pinned_task_unchanged():
    msgs = agent_session(turns=4)
    first = summarize(Window(msgs[:20]), ctx(force=True, config=CompactionConfig()))
    window = Window(
        msgs[first.window.messages[0].seq - 1 :], first.window.retain, first.window.summary
    )
    second = summarize(window, ctx(force=True))
    assert second.report.applied and second.window.retain == first.window.retain
    assert second.window.retain.startswith(PINNED_MARK)


def test_a_task_too_big_for_the_window_is_summarised_not_pinned():
    msgs = agent_session(turns=3)
    out = summarize(Window(msgs), ctx(force=True, max_context_tokens=COUNTER.message(msgs[0])))
    assert not is_pinned_retain(out.window.retain)


def test_summary_call_rereads_the_context_as_sent_then_the_instruction():
    msgs = agent_session(turns=3)
    parts = ContextParts(model="m", max_output_tokens=100, messages=msgs)
    fake = FakeSummarizer()
    summarize(Window(msgs), ctx(summarizer=fake, force=True, context_parts=parts))
    (request,) = fake.requests
    sent = request.llm_messages()
    # The context's own messages, as its calls send them (the provider's cached
    # prefix), up to the ones the compaction keeps: those are not sent at all.
    kept = replace(parts, messages=msgs[:-8])
    assert sent[:-1] == sent_history(kept) and sent[0].text == msgs[0].text
    assert all(m.text != msgs[-1].text for m in sent)
    assert "Summarise only what comes before" not in sent[-1].text
    body = request.anthropic_body()
    assert body["messages"][-1]["role"] == "user" and "tools" not in body


def test_clearing_old_outputs_alone_when_it_pays_and_compaction_is_not_due():
    cheap = replace(BASE, used=14_000, clearable=9_000)
    decision = decide(cheap)
    assert decision.action == "clear" and decision.compact
    # Too little to free: the prefix is left alone until the compaction.
    assert decide(replace(cheap, clearable=1_000)).action == "leave"
    # When the compaction is due, it wins (it clears the outputs as its first link).
    assert decide(replace(cheap, used=26_000)).action == "compact"


def test_a_task_too_big_to_pin_whole_is_pinned_condensed():
    msgs = agent_session(turns=3)
    lines = [f"requirement {i}: keep module_{i:03d} compatible" for i in range(300)]
    msgs[0] = replace(msgs[0], content="\n".join(lines), token_count=None)
    room = COUNTER.message(msgs[0])  # the task alone would fill the room
    out = summarize(Window(msgs), ctx(force=True, max_context_tokens=room))
    retain = out.window.retain
    assert is_pinned_retain(retain)
    assert lines[0] in retain and lines[-1] in retain
    kept = [line for line in lines if line in retain]
    assert len(kept) < len(lines) and "[…]" in retain  # lines left out, marked
    assert COUNTER.text(retain) <= 0.65 * room
