"""The sliding_window and full_history strategies (docs/concepts/compaction.md#sliding-window,
docs/concepts/compaction.md#full-history)."""

from __future__ import annotations

from contextsvc.engine.strategies.base import CompactionConfig, Window
from contextsvc.engine.strategies.chain import run_chain, validate_chain
from contextsvc.engine.strategies.pinning import is_pinned_retain
from contextsvc.engine.strategies.sliding import sliding_window
from tests.engine.test_strategies import agent_session, ctx


def orphans(messages) -> int:
    called = {c.id for m in messages for c in m.tool_calls}
    return sum(1 for m in messages if m.role == "tool" and m.tool_call_id not in called)


def test_sliding_window_keeps_the_last_n_at_a_safe_cut():
    msgs = agent_session(turns=4)
    out = sliding_window(Window(msgs), ctx(config=CompactionConfig(keep_last_n=5)))
    kept = out.window.messages
    assert out.report.applied and len(kept) <= 5 and kept == msgs[-len(kept) :]
    assert orphans(kept) == 0 and kept[0].role in ("user", "assistant")
    # No summary call: the dropped messages are gone, the task is pinned verbatim.
    assert out.window.summary == "" and is_pinned_retain(out.window.retain)
    assert msgs[0].text in out.window.retain


def test_sliding_window_with_fewer_messages_than_n_is_a_no_op():
    msgs = agent_session(turns=1)
    out = sliding_window(Window(msgs), ctx(config=CompactionConfig(keep_last_n=50)))
    assert not out.report.applied and out.window.messages == msgs


def test_full_history_never_compresses_even_forced():
    msgs = agent_session(turns=3)
    result = run_chain(Window(msgs), validate_chain(["full_history"]), ctx(force=True))
    assert not result.changed and result.window.messages == msgs
