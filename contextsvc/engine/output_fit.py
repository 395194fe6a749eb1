"""Fitting tool outputs into the history room: a head-and-tail cut of a view.

An agent doing one task is one long turn: the results it asked for last are
what it acts on next, and clearing them (or spec 003's one-turn fallback,
which clears every output of the turn) makes it ask again, in a loop. So
before anything clears the newest outputs, their views are cut instead: the
first and last lines stay (a command's header and its verdict are usually
there), the middle is replaced by a notice naming the ref and the lines to
read back with ``tool_output_cache``. Pure: text and a token counter in.
"""

from __future__ import annotations

from collections.abc import Callable

from contextsvc.engine.output_views import (
    GREP_TOOL,
    READ_TOOL,
    OutputInfo,
    View,
    ViewConfig,
    iter_text_lines,
)
from contextsvc.engine.tokens import approx_tokens

# One output may take at most this share of the history room (the effective
# window less the fixed part): the rest is for the task, the summary and the
# next results.
NEWEST_SHARE = 0.5
# Below this a cut view says too little to be worth keeping over the notice.
MIN_VIEW_TOKENS = 200
# The head gets this share of a cut view, the tail the rest.
HEAD_SHARE = 0.6


def _notice(ref: str | None, first: int, last: int, total: int) -> str:
    where = (
        f" The full output is stored as ref={ref}: read them with {READ_TOOL} "
        f'{{"ref_id": "{ref}", "offset": {first}, "limit": {last - first + 1}}}'
        f" or search with {GREP_TOOL}."
        if ref
        else ""
    )
    return f"[… lines {first:,}-{last:,} of {total:,} cut to fit the context window.{where}]"


def head_tail_view(
    text: str, ref: str | None, max_tokens: int, count: Callable[[str], int]
) -> str | None:
    """``text`` cut to its first and last lines so that it counts at most
    ``max_tokens`` (``count``: the session's text estimate); None when it
    already fits or no cut would fit (fewer than three lines to work with)."""
    total = count(text)
    if total <= max_tokens:
        return None
    lines = text.split("\n")
    n = len(lines)
    if n < 3:
        # One giant line: keep its head and tail characters.
        lines = [text[i : i + 200] for i in range(0, len(text), 200)]
        n = len(lines)
        if n < 3:
            return None
    chars_per_token = max(1.0, len(text) / max(1, total))
    budget = max_tokens
    for _ in range(6):
        room = max(0, int((budget - 60) * chars_per_token))
        head, used = 0, 0
        while head < n - 2 and used + len(lines[head]) + 1 <= room * HEAD_SHARE:
            used += len(lines[head]) + 1
            head += 1
        tail, used_tail = 0, 0
        while tail < n - head - 1 and used + used_tail + len(lines[n - 1 - tail]) + 1 <= room:
            used_tail += len(lines[n - 1 - tail]) + 1
            tail += 1
        head = max(head, 1)
        tail = min(max(tail, 1), n - head - 1)
        notice = _notice(ref, head + 1, n - tail, n)
        view = "\n".join([*lines[:head], notice, *lines[n - tail :]])
        if count(view) <= max_tokens:
            return view
        budget = int(budget * 0.8)
        if budget <= 60:
            break
    return None


def capped_view(view: View, text: str, info: OutputInfo, config: ViewConfig) -> View:
    """``view`` of the output ``text`` within ``config.view_tokens``: over it, the
    output's first and last lines (long lines already cut at ``max_line_length``)
    and a notice naming the lines left out and the ref to read them by.

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
    if len(text) > 2 * span:
        # Only the ends are read (a 30 MB output costs what a 300 KB one does);
        # the middle stands in as one line, and the notice is rewritten with
        # the stored output's own line numbers.
        head = text[:span].split("\n")[:-1]
        tail = text[-span:].split("\n")[1:]
        text = "\n".join([*head, "…", *tail])
    lines = "\n".join(iter_text_lines(text, config.max_line_length))
    cut = head_tail_view(lines, info.ref, cap, approx_tokens)
    if cut is None or approx_tokens(cut) >= approx_tokens(shown):
        return view
    parts = cut.split("\n")
    at = next((i for i, line in enumerate(parts) if line.startswith("[… lines ")), None)
    if at is None:
        return view
    total = max(info.line_count, len(parts) - 1)
    tail_kept = len(parts) - at - 1
    parts[at] = _notice(info.ref, at + 1, total - tail_kept, total)
    return View(text="\n".join(parts), state="cut", lines_shown=len(parts) - 1)
