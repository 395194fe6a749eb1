"""The newest tool outputs fit the history room: head-and-tail cuts before the one-turn fallback.

The regression these pin: an agent doing one task is one long turn (Claude
Code: one user message, then a tool loop). A deep compaction target once
made every compaction run the chain down to the one-turn fallback
(docs/concepts/compaction.md#single-turn-fallback), which clears every output of the turn, the
newest included: the agent never saw its newest result and looped.
"""

from __future__ import annotations

from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.output_fit import head_tail_view
from contextsvc.engine.strategies.base import StrategyContext, Window
from contextsvc.engine.strategies.chain import DEFAULT_CHAIN, run_chain
from tests.engine.test_strategies import COUNTER, call, numbered, result, user


def step_output(k: int, lines: int = 2_000) -> str:
    body = "\n".join(str(i) for i in range(1, lines + 1))
    return f"STEP-{k}-BEGIN\n{body}\nSTEP-{k}-END"


def one_turn(steps: int) -> list:
    msgs = [user("Run the numbered steps, then report.")]
    for k in range(steps):
        msgs.append(call(f"c{k}", text=""))
        msgs.append(result(f"c{k}", step_output(k), ref=f"ref_{k}"))
    return numbered(msgs)


def test_head_tail_view_keeps_both_ends_and_names_the_ref():
    text = step_output(7)
    view = head_tail_view(text, "out_x", 300, COUNTER.text)
    assert view is not None and COUNTER.text(view) <= 300
    assert view.startswith("STEP-7-BEGIN\n1\n") and view.endswith("STEP-7-END")
    assert "ref=out_x" in view and "\n1000\n" not in view
    assert head_tail_view("short", "r", 300, COUNTER.text) is None


def test_spec003_one_turn_history_keeps_its_newest_output_cut_not_cleared():
    msgs = one_turn(6)
    newest = COUNTER.message(msgs[-1])
    # A room the newest output alone overflows, and a deep target of almost nothing.
    ctx = StrategyContext(
        counter=COUNTER,
        summarizer=OfflineSummarizer(),
        target_tokens=200,
        room_tokens=int(newest * 0.9),
    )
    out = run_chain(Window(msgs), DEFAULT_CHAIN, ctx)
    window = out.window
    assert "fit_outputs" in out.result.strategies_run
    assert "drop_oldest_turns" not in out.result.strategies_run
    last = window.messages[-1]
    assert last.role == "tool" and last.view_state == "cut"
    assert last.context_text.startswith("STEP-5-BEGIN") and "STEP-5-END" in last.context_text
    assert window.tokens(COUNTER) <= ctx.room_tokens


def test_spec003_single_turn_fallback_still_runs_when_nothing_can_fit():
    # One user message far over the room, no output to cut: the fallback is the way out.
    msgs = numbered([user("x " * 40_000)])
    ctx = StrategyContext(
        counter=COUNTER, summarizer=OfflineSummarizer(), target_tokens=500, room_tokens=1_000
    )
    out = run_chain(Window(msgs), DEFAULT_CHAIN, ctx)
    assert "drop_oldest_turns" in out.result.strategies_run
    assert out.window.tokens(COUNTER) < COUNTER.messages(msgs)


def test_the_emergency_link_waits_for_the_room_not_the_target():
    msgs = one_turn(4)
    total = COUNTER.messages(msgs)
    ctx = StrategyContext(
        counter=COUNTER, summarizer=OfflineSummarizer(), target_tokens=100, room_tokens=total
    )
    out = run_chain(Window(msgs), DEFAULT_CHAIN, ctx)
    assert "drop_oldest_turns" not in out.result.strategies_run
    assert any(m.context_text.startswith("STEP-3-BEGIN") for m in out.window.messages)
