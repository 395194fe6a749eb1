"""The simple strategies: ``sliding_window`` and ``full_history``
(docs/concepts/compaction.md#sliding-window).

``sliding_window`` keeps the last ``keep_last_n`` messages and drops the rest
(no summary call: nothing to pay for but the prefix it re-writes), cutting
only where no tool result loses its call: at a user message or an assistant
message that starts an iteration, never past a call still waiting for its
result. The task stays verbatim in the retain slot, as with a summary.
``full_history`` never compresses: the guard still protects the window (its
``final`` turn when nothing fits).
"""

from __future__ import annotations

from contextsvc.engine.strategies.base import StrategyContext, StrategyOutcome, Window, make_outcome
from contextsvc.engine.strategies.cuts import open_call_floor
from contextsvc.engine.strategies.pinning import (
    agent_pinned,
    is_pinned_retain,
    pinned_in,
    pinned_retain,
    with_agent_pins,
)
from contextsvc.engine.turns import unsafe_cuts


def safe_cut_at_or_after(window: Window, target: int) -> int:
    """The first safe cut at or after ``target`` (0: none)."""
    msgs = window.messages
    unsafe = unsafe_cuts(msgs)
    floor = open_call_floor(msgs)
    for i in range(max(target, 1), min(floor, len(msgs) - 1) + 1):
        if msgs[i].role in ("user", "assistant") and not unsafe[i]:
            return i
    return 0


def sliding_window(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """Keep the newest ``keep_last_n`` messages (at a safe cut), drop the older ones."""
    msgs = window.messages
    keep = ctx.config.keep_last_n
    details = {"keep_last_n": keep}
    if len(msgs) <= keep:
        return make_outcome(
            "sliding_window", window, None, ctx, {**details, "skipped": "nothing beyond the last N"}
        )
    cut = safe_cut_at_or_after(window, len(msgs) - keep)
    if not cut:
        return make_outcome(
            "sliding_window", window, None, ctx, {**details, "skipped": "no safe cut"}
        )
    retain = window.retain
    if ctx.config.pin_task and not retain and not is_pinned_retain(retain):
        pinned = pinned_in(
            msgs[:cut],
            at_start=msgs[0].seq == 1,
            counter=ctx.counter,
            room=ctx.max_context_tokens,
        )
        retain = pinned_retain(pinned, ctx.counter, ctx.max_context_tokens) if pinned else retain
    pins = agent_pinned(msgs[:cut])
    if pins:
        retain = with_agent_pins(retain, pins)
    details["dropped_messages"] = cut
    return make_outcome(
        "sliding_window", window, window.with_messages(list(msgs[cut:]), retain), ctx, details
    )


def full_history(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """Never compresses (docs/concepts/compaction.md#sandwich): the window stays as it is."""
    return make_outcome(
        "full_history", window, None, ctx, {"skipped": "full_history never compresses"}
    )
