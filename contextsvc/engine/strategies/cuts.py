"""Where a compaction may cut: safe turn boundaries below the open-call floor
(docs/concepts/context-build.md#turns)."""

from __future__ import annotations

from collections.abc import Sequence

from contextsvc.engine.messages import Message
from contextsvc.engine.pairing import pair_tool_calls
from contextsvc.engine.strategies.base import TokenCounter
from contextsvc.engine.turns import (
    find_safe_boundary,
    is_safe_boundary,
    last_turns_start,
    parse_turn_boundaries,
    unsafe_cuts,
)


def open_call_floor(messages: Sequence[Message]) -> int:
    """Index of the earliest call of the last turn still waiting for its result.

    Such a result will be appended after the compaction, so no cut may pass
    its call: the result would arrive with no call before it. Unanswered calls
    of earlier turns are abandoned (a user spoke since); cutting past them is
    allowed and the store closes them. ``len(messages)`` when nothing is open.
    """
    starts = parse_turn_boundaries(messages)
    last_turn = starts[-1] if starts else 0
    waiting = pair_tool_calls(messages).waiting
    open_at = [i for calls in waiting.values() for i, _ in calls if i >= last_turn]
    return min(open_at) if open_at else len(messages)


def snap_cut(messages: Sequence[Message], target: int, *, ceiling: int | None = None) -> int:
    """A safe turn-boundary cut at or before ``target`` (docs/concepts/context-build.md#safe-cuts),
    never past ``ceiling``; a cut at the very end is always safe. 0: no cut."""
    n = len(messages)
    ceiling = n if ceiling is None else min(ceiling, n)
    target = min(max(target, 0), ceiling)
    if target == n:
        return n
    cut = find_safe_boundary(messages, target)
    # With no user message findSafeBoundary hands the target back as it is;
    # a compaction only ever cuts at a real turn start.
    if cut > ceiling or not is_safe_boundary(messages, cut):
        return 0
    return cut


def summary_cut(messages: Sequence[Message], retain_last_turns: int) -> int:
    """Where the kept part starts: the last N turns, snapped to a safe cut."""
    start = last_turns_start(messages, retain_last_turns)
    return snap_cut(messages, start, ceiling=open_call_floor(messages))


def iteration_cut(
    messages: Sequence[Message], start: int, keep_tokens: int, counter: TokenCounter
) -> int:
    """A cut inside the kept turns so that what follows fits ``keep_tokens``.

    An agent that works through one task is one long turn (one user message,
    hundreds of tool iterations): keeping "the last turn" keeps everything, and
    a summary could never free anything. docs/concepts/compaction.md#single-turn-fallback allows
    breaking turn atomicity as the last resort; here it is broken at an iteration boundary
    (an assistant message where no call is separated from its results, never
    past a call still waiting), keeping as many recent iterations as fit.
    ``start`` when no such cut exists.
    """
    n = len(messages)
    unsafe = unsafe_cuts(messages)
    floor = open_call_floor(messages)
    candidates = [
        i
        for i in range(start + 1, min(floor, n - 1) + 1)
        if messages[i].role == "assistant" and not unsafe[i]
    ]
    if not candidates:
        return start
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + counter.message(messages[i])
    for i in candidates:
        if suffix[i] <= keep_tokens:
            return i
    return candidates[-1]  # even the newest iteration alone is over: keep just it


def leaving_cut(
    messages: Sequence[Message], retain_last_turns: int, target_tokens: int, counter: TokenCounter
) -> tuple[int, bool]:
    """Where a summarising compaction cuts: before the last ``retain_last_turns``
    turns, and (True) whether it had to cut inside the newest turn.

    the last resort (docs/concepts/compaction.md#single-turn-fallback), for a history with no whole
    turn to summarise (one agent task of many iterations): the kept turns get at most half the
    target; the rest is for the summary and what arrives next. With an earlier turn
    start to cut at, the cut stays there even when the kept turns exceed the
    target: it is a goal, and the emergency link fits a newest turn that
    overflows the room.
    """
    cut = summary_cut(messages, retain_last_turns)
    if cut == 0 and target_tokens > 0 and retain_last_turns > 0:
        keep = target_tokens // 2
        if counter.messages(messages[cut:]) > keep:
            inner = iteration_cut(messages, cut, keep, counter)
            return inner, inner > cut
    return cut, False
