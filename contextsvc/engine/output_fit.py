"""Fitting tool outputs into the history room: a head-and-tail cut of a view.

An agent doing one task is one long turn: the results it asked for last are
what it acts on next, and clearing them (or the one-turn fallback
(docs/concepts/compaction.md#single-turn-fallback), which clears every output of the turn) makes it
ask again, in a loop. So before anything clears the newest outputs, their views are cut instead: the
first and last lines stay (a command's header and its verdict are usually
there), and the middle lines that say where something is (a path, a saved
file, an id, a URL: ``engine.output_keep``); each run left out is replaced by
a marker with its line numbers, the first naming the ref and the lines to read
back with ``tool_output_cache``. Pure: text and a token counter in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contextsvc.engine.output_keep import (
    MIDDLE_SHARE,
    Pointer,
    choose_pointers,
    find_pointers,
    gap_marker,
    pointers_in_lines,
)
from contextsvc.engine.output_views import (
    GREP_TOOL,
    READ_TOOL,
    OutputInfo,
    View,
    ViewConfig,
    iter_text_lines,
)
from contextsvc.engine.recall import SEARCH_HINT_SHORT
from contextsvc.engine.tokens import approx_tokens

# One output may take at most this share of the history room (the effective
# window less the fixed part): the rest is for the task, the summary and the
# next results.
NEWEST_SHARE = 0.5
# Below this a cut view says too little to be worth keeping over the notice.
MIN_VIEW_TOKENS = 200
# The head gets this share of a cut view, the tail the rest.
HEAD_SHARE = 0.6


def _notice(ref: str | None, first: int, last: int, total: int, search: bool = True) -> str:
    where = (
        f" The full output is stored as ref={ref}: read them with {READ_TOOL} "
        f'{{"ref_id": "{ref}", "offset": {first}, "limit": {last - first + 1}}}'
        f" or search with {GREP_TOOL}{'; ' + SEARCH_HINT_SHORT if search else ''}."
        if ref
        else ""
    )
    return f"[… lines {first:,}-{last:,} of {total:,} cut to fit the context window.{where}]"


@dataclass(frozen=True, slots=True)
class _Source:
    """The lines a cut is made from: ``head`` from line 1 on, ``tail`` ending at
    line ``total`` (the same list when the whole output is at hand), and the
    middle lines worth keeping (``engine.output_keep``)."""

    head: Sequence[str]
    tail: Sequence[str]
    total: int
    pointers: Sequence[Pointer] = ()


def _render(
    src: _Source, head: int, tail: int, middle: Sequence[Pointer], ref: str | None, search: bool
) -> str:
    """Head, kept middle lines and tail in output order; each run left out marked
    with its line numbers, the first with the notice naming the ref."""
    shown = [
        *[(i + 1, line) for i, line in enumerate(src.head[:head])],
        *[(p.number, p.text) for p in middle],
        *[(src.total - tail + 1 + i, line) for i, line in enumerate(src.tail[-tail:])],
    ]
    out: list[str] = []
    last = 0
    marked = False
    for number, line in shown:
        if number > last + 1:
            gap = (last + 1, number - 1)
            out.append(gap_marker(*gap) if marked else _notice(ref, *gap, src.total, search))
            marked = True
        out.append(line)
        last = number
    return "\n".join(out)


def _cut(
    src: _Source,
    ref: str | None,
    max_tokens: int,
    count: Callable[[str], int],
    chars_per_token: float,
    search: bool,
) -> str | None:
    """The largest head + kept middle + tail of ``src`` counting at most ``max_tokens``."""
    n_head, n_tail, total = len(src.head), len(src.tail), src.total
    # The notice's own size (its numbers at their widest), so the first try fits.
    notice = count(_notice(ref, total, total, total, search)) + 4
    budget = max_tokens
    for _ in range(6):
        room = max(0, int((budget - notice) * chars_per_token))
        reserve = 0
        if src.pointers:
            picked = choose_pointers(src.pointers, int(room * MIDDLE_SHARE))
            reserve = sum(len(p.text) + 1 + 40 for p in picked)
        rest = room - reserve
        head, used = 0, 0
        while head < min(n_head, total - 2) and used + len(src.head[head]) + 1 <= rest * HEAD_SHARE:
            used += len(src.head[head]) + 1
            head += 1
        tail, used_tail = 0, 0
        while (
            tail < min(n_tail, total - head - 1)
            and used + used_tail + len(src.tail[n_tail - 1 - tail]) + 1 <= rest
        ):
            used_tail += len(src.tail[n_tail - 1 - tail]) + 1
            tail += 1
        head = max(head, 1)
        tail = min(max(tail, 1), total - head - 1)
        inside = [p for p in src.pointers if head < p.number <= total - tail]
        middle = choose_pointers(inside, reserve) if inside else []
        view = _render(src, head, tail, middle, ref, search)
        if count(view) <= max_tokens:
            return view
        budget = int(budget * 0.8)
        if budget <= notice:
            break
    return None


def head_tail_view(
    text: str,
    ref: str | None,
    max_tokens: int,
    count: Callable[[str], int],
    search: bool = True,
) -> str | None:
    """``text`` cut to its first and last lines, and the middle lines naming a path,
    a file, an id or a URL (``engine.output_keep``), so that it counts at most
    ``max_tokens`` (``count``: the session's text estimate); None when it already
    fits or no cut would fit (fewer than three lines to work with). With ``ref``,
    the notice names the tools that read the rest (and, with ``search``, the
    session-wide search)."""
    total = count(text)
    if total <= max_tokens:
        return None
    lines = text.split("\n")
    pointers: list[Pointer] = []
    if len(lines) >= 3:
        pointers = pointers_in_lines(lines, 1, len(lines) - 1)
    else:
        # One giant line: keep its head and tail characters.
        lines = [text[i : i + 200] for i in range(0, len(text), 200)]
        if len(lines) < 3:
            return None
    src = _Source(head=lines, tail=lines, total=len(lines), pointers=pointers)
    return _cut(src, ref, max_tokens, count, max(1.0, len(text) / max(1, total)), search)


def capped_view(view: View, text: str, info: OutputInfo, config: ViewConfig) -> View:
    """``view`` of the output ``text`` within ``config.view_tokens``: over it, the
    output's first and last lines (long lines already cut at ``max_line_length``)
    and the middle lines naming where things are, with notices naming the lines
    left out and the ref to read them by.

    An output in context is written to the prompt cache once (1.25×) and read
    back on every later call (0.1×) until a compaction removes it; most of a
    long output is never acted on. The agent reads any part back by ref."""
    cap = config.view_tokens
    if cap is None or config.style != "cut" or not config.enabled:
        return view
    shown = view.text if view.text is not None else text
    if approx_tokens(shown) <= cap:
        return view
    cap = max(cap, MIN_VIEW_TOKENS)
    span = 8 * 4 * cap  # characters: far more of each end than the view keeps
    width = config.max_line_length
    total = max(info.line_count, 1)
    if len(text) > 2 * span:
        # Only the ends are read whole (a 30 MB output costs what a 300 KB one
        # does); the middle is only searched for the lines worth keeping, and
        # every line keeps the stored output's own number.
        head_end = text.rfind("\n", 0, span)
        tail_start = text.find("\n", len(text) - span) + 1
        head = list(iter_text_lines(text[: max(head_end, 0)], width))
        tail = list(iter_text_lines(text[tail_start:], width))
        total = max(total, len(head) + len(tail) + 1)
        pointers = find_pointers(
            text, head_end + 1, max(tail_start - 1, head_end + 1), len(head) + 1
        )
        src = _Source(head=head, tail=tail, total=total, pointers=pointers)
    else:
        lines = list(iter_text_lines(text, width))
        total = len(lines)
        pointers = pointers_in_lines(lines, 1, len(lines) - 1) if len(lines) >= 3 else []
        src = _Source(head=lines, tail=lines, total=total, pointers=pointers)
    if src.total < 3:
        return view
    cut = _cut(src, info.ref, cap, approx_tokens, 4.0, config.search_hint)
    if cut is None or approx_tokens(cut) >= approx_tokens(shown):
        return view
    parts = cut.split("\n")
    markers = sum(1 for line in parts if line.startswith("[… lines "))
    return View(text=cut, state="cut", lines_shown=len(parts) - markers)
