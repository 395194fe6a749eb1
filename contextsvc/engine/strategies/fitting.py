"""The outputs a compaction keeps must fit: cut their views before anything clears them.

Tool clearing keeps the newest results and a summary keeps the newest
iterations; in a small window (or next to a large fixed part, such as Claude
Code's tool schemas) those alone can be over the history room. Then, before
the emergency link drops turns (or, in a one-turn history, clears every
output of the turn, the newest included), the kept outputs' views are cut to
their head and tail (``engine.output_fit``), oldest first, the newest last.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from contextsvc.engine.output_fit import MIN_VIEW_TOKENS, NEWEST_SHARE, head_tail_view
from contextsvc.engine.strategies.base import StrategyContext, StrategyOutcome, Window, make_outcome

# Cut down to this share of the room, not to its brim: the next results arrive
# in the same room.
FIT_SHARE = 0.8
CUTTABLE = ("full", "cut", "offloaded")


def over_room(window: Window, ctx: StrategyContext) -> bool:
    """Is the window past the history room (the hard limit a compaction must meet)?"""
    return ctx.room_tokens is not None and window.tokens(ctx.counter) > ctx.room_tokens


def fit_outputs(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """Cut the views of the window's tool outputs (head and tail) until it fits
    ``FIT_SHARE`` of the room: first any output above ``NEWEST_SHARE`` of the
    room, then the oldest first, the newest last; never under ``MIN_VIEW_TOKENS``."""
    counter = ctx.counter
    room = ctx.room_tokens
    if room is None:
        return make_outcome("fit_outputs", window, None, ctx, {"skipped": "no room given"})
    goal = int(FIT_SHARE * room)
    msgs = list(window.messages)
    total = window.tokens(counter)
    tools = [
        i
        for i, m in enumerate(msgs)
        if m.role == "tool"
        and m.view_state in CUTTABLE
        and counter.message(m) > MIN_VIEW_TOKENS
        and not m.part_count
        and not m.pinned
    ]
    cut: list[int] = []

    def shrink(i: int, to: int) -> int:
        msg = msgs[i]
        overhead = counter.message(msg) - counter.text(msg.context_text)
        view = head_tail_view(
            msg.context_text,
            msg.output_ref,
            max(1, to - overhead),
            counter.text,
            window.search_hint,
        )
        if view is None:
            return 0
        new = counter.recount(replace(msg, view=view, view_state="cut"))
        saved = counter.message(msg) - counter.message(new)
        if saved <= 0:
            return 0
        msgs[i] = new
        if i not in cut:
            cut.append(i)
        return saved

    cap = int(NEWEST_SHARE * room)
    for i in tools:
        if total <= goal:
            break
        if counter.message(msgs[i]) > cap:
            total -= shrink(i, cap)
    for i in tools:
        if total <= goal:
            break
        excess = total - goal
        total -= shrink(i, max(MIN_VIEW_TOKENS, counter.message(msgs[i]) - excess))
    details: dict[str, Any] = {
        "cut": len(cut),
        "cut_seqs": [msgs[i].seq for i in sorted(cut)],
        "room_tokens": room,
    }
    if not cut:
        return make_outcome(
            "fit_outputs", window, None, ctx, {**details, "skipped": "nothing to cut"}
        )
    return make_outcome("fit_outputs", window, window.with_messages(msgs), ctx, details)
