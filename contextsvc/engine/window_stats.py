"""What a context record keeps about a live window besides the messages
themselves: the largest messages, the placeholders (trimmed, cut, cleared …)
counted by state with their tokens, the tokens of the tool outputs, and the
window as runs of consecutive seqs in one view state (what the call record's
account of a call lists per message, ``prompting.services.calls``).

``window_stats(messages, start)`` extends the figures of ``messages[:start.count]``
with the messages after them, so a caller that keeps the figures beside an
append-only window (the per-process window cache) pays for the new messages
only, not for a pass over the whole window on every build.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .messages import Message

LARGEST = 20  # messages listed by size


@dataclass(frozen=True, slots=True)
class WindowStats:
    count: int  # messages covered: the window's first ``count``
    outputs_tokens: int  # tool results' token counts, summed
    # The ``LARGEST`` largest by token count, largest first, ties in window order
    # (as ``heapq.nlargest`` over the window would list them): (index, message).
    largest: tuple[tuple[int, Message], ...]
    # view state (other than "full") → (count, tokens)
    placeholders: tuple[tuple[str, int, int], ...]
    # The window in seq order as runs (first seq, last seq, view state, tokens):
    # a run ends where the state changes or the seqs skip (a message not live).
    runs: tuple[tuple[int, int, str, int], ...] = ()
    tokens: int = 0  # every message's token count, summed

    @property
    def largest_messages(self) -> list[Message]:
        return [m for _, m in self.largest]


EMPTY = WindowStats(count=0, outputs_tokens=0, largest=(), placeholders=(), runs=())


def _order(item: tuple[int, Message]) -> tuple[int, int]:
    return -(item[1].token_count or 0), item[0]


def window_stats(messages: Sequence[Message], start: WindowStats | None = None) -> WindowStats:
    """The figures of ``messages``; with ``start`` (those of a prefix of it),
    only the messages past the prefix are read."""
    base = start if start is not None and start.count <= len(messages) else EMPTY
    outputs = base.outputs_tokens
    states = {state: [n, total] for state, n, total in base.placeholders}
    first = base.count
    runs = [list(run) for run in base.runs[-1:]]  # only the last run can grow
    tokens = [m.token_count or 0 for m in messages[first:]]
    for i, count in enumerate(tokens, start=first):
        msg = messages[i]
        if msg.role == "tool":
            outputs += count
        state = msg.view_state
        if state != "full":
            entry = states.setdefault(state, [0, 0])
            entry[0] += 1
            entry[1] += count
        seq = msg.seq or 0
        last = runs[-1] if runs else None
        if last is not None and last[2] == state and last[1] + 1 == seq:
            last[1] = seq
            last[3] += count
        else:
            runs.append([seq, seq, state, count])
    # The new messages' largest by index with a C-level key (stable: ties keep
    # window order), then merged with the prefix's.
    top = heapq.nlargest(LARGEST, range(len(tokens)), key=tokens.__getitem__)
    new = [(first + j, messages[first + j]) for j in top]
    largest = tuple(heapq.nsmallest(LARGEST, [*base.largest, *new], key=_order))
    return WindowStats(
        count=len(messages),
        outputs_tokens=outputs,
        largest=largest,
        placeholders=tuple((state, v[0], v[1]) for state, v in states.items()),
        runs=(*base.runs[:-1], *((a, b, c, d) for a, b, c, d in runs)),
        tokens=base.tokens + sum(tokens),
    )


def seq_ranges(runs: Sequence[tuple[int, int, str, int]]) -> dict[str, Any]:
    """The runs as a call record keeps them: ``ranges``, the seqs sent as
    [first, last] pairs, and ``views``, per view state other than ``full``,
    the [first, last] pairs in that state (a message in no view pair went whole)."""
    ranges: list[list[int]] = []
    views: dict[str, list[list[int]]] = {}
    for first, last, state, _ in runs:
        if ranges and ranges[-1][1] + 1 == first:
            ranges[-1][1] = last
        else:
            ranges.append([first, last])
        if state != "full":
            views.setdefault(state, []).append([first, last])
    return {"ranges": ranges, "views": views}
