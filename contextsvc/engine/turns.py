"""Turns and safe cut points (docs/concepts/context-build.md#safe-cuts, parseTurnBoundaries /
findSafeBoundary).

A Turn starts at a ``user`` message and is the atomic unit of compression:
cutting inside one can orphan an assistant ``tool_calls`` message from its
``tool`` results. History never contains a system message
(docs/concepts/context-build.md#turns), so nothing here skips or expects one; a history may still
start with non-user messages (e.g. the kept tail after a compaction), which form a leading
span that is not a turn.

A cut at ``index`` splits ``history[:index] | history[index:]``.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message
from contextsvc.engine.pairing import pair_tool_calls


def parse_turn_boundaries(history: Sequence[Message]) -> list[int]:
    """docs/concepts/context-build.md#turns: the index of each user message (a turn start)."""
    return [i for i, msg in enumerate(history) if msg.role == "user"]


def unsafe_cuts(history: Sequence[Message]) -> list[bool]:
    """``unsafe[k]`` is True when a cut at k separates a call from its result.

    A pair (c, r) is split by every cut in c+1 … r; a difference array marks all
    of them in O(n + pairs) instead of checking each cut against each pair.
    Results with no earlier call (``engine.pairing`` orphans) are already
    orphans; no cut can make that worse.
    """
    n = len(history)
    delta = [0] * (n + 2)
    for result_at, (call_at, _) in pair_tool_calls(history).call_of.items():
        delta[call_at + 1] += 1
        delta[result_at + 1] -= 1
    unsafe = [False] * (n + 1)
    open_pairs = 0
    for k in range(n + 1):
        open_pairs += delta[k]
        unsafe[k] = open_pairs > 0
    return unsafe


def is_safe_boundary(history: Sequence[Message], index: int) -> bool:
    """docs/concepts/context-build.md#safe-cuts: may history be cut at ``index``? Only at a turn
    start.

    A turn start is a user message that no call/result pair straddles (an
    interjected user message between a call and its result is not one). A cut
    before an assistant message inside a turn is never safe, even when every
    call before it has its result: the turn is the atomic unit. Positions at or
    before the start and at or past the end are the ends, always safe — out of
    range is clamped, never an error.
    """
    n = len(history)
    if index <= 0 or index >= n:
        return True
    return history[index].role == "user" and not unsafe_cuts(history)[index]


def find_safe_boundary(history: Sequence[Message], target_index: int) -> int:
    """docs/concepts/context-build.md#safe-cuts: snap ``target_index`` to a turn boundary that is a
    safe cut.

    Targets at or before the start give 0 and at or past the end give
    ``len(history)`` (the ends are boundaries; clamped, never an error).
    Inside, the boundary at or before the target is preferred (cutting less
    keeps more context), else the nearest one after it; 0 when no boundary
    above 0 qualifies — nothing can be cut safely and the caller picks its
    fallback (the emergency path keeps only the last user message,
    docs/concepts/compaction.md#single-turn-fallback). A history with no user message has no turns
    to snap to: the target comes back unchanged (callers that need pairing safety check
    ``unsafe_cuts``).
    """
    n = len(history)
    if target_index <= 0:
        return 0
    if target_index >= n:
        return n
    starts = parse_turn_boundaries(history)
    if not starts:
        return target_index
    unsafe = unsafe_cuts(history)
    candidates = [b for b in starts if b > 0 and not unsafe[b]]
    before = [b for b in candidates if b <= target_index]
    if before:
        return before[-1]
    after = [b for b in candidates if b > target_index]
    return after[0] if after else 0


def turn_spans(history: Sequence[Message]) -> list[tuple[int, int]]:
    """``[start, end)`` of each turn; messages before the first user message form a leading span."""
    n = len(history)
    if n == 0:
        return []
    starts = parse_turn_boundaries(history)
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    return [(start, end) for start, end in zip(starts, [*starts[1:], n], strict=True)]


def last_turns_start(history: Sequence[Message], n: int) -> int:
    """Index where the last ``n`` turns start (0 if there are fewer than ``n``).

    Only user-started turns count; a leading non-user span is not a turn, so it
    is cut along with the older turns when exactly ``n`` turns exist. ``n == 0``
    keeps nothing and returns ``len(history)``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise EngineValidationError(
            f"Number of turns must be a non-negative integer, got {n!r}", field="retain_last_turns"
        )
    if n == 0:
        return len(history)
    boundaries = parse_turn_boundaries(history)
    if len(boundaries) < n:
        return 0
    return boundaries[-n]
