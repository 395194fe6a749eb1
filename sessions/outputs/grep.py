"""Grep of a stored output: line-based regex search with context, time-limited
(docs/concepts/trimming.md#reading-refs).

Streams the chunks a few MiB at a time, never the whole blob.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex
from django.conf import settings

from contextsvc.errors import ValidationFailed

from ..models import ToolOutput
from .read import CUT_MARK, iter_chunks
from .store import CHUNK_BYTES

GREP_BUFFER_CHUNKS = 16  # chunks decoded and searched at once (~4 MiB)
# Grep of one line longer than this searches it piece by piece instead of
# holding it whole (a 200 MB minified file is one line).
GREP_MAX_LINE_BYTES = 4 * 1024 * 1024
GREP_LINE_CHARS = 2000  # a matched or context line is shown up to this many characters


def _compile(pattern: str, ignore_case: bool) -> regex.Pattern:
    flags = regex.MULTILINE
    if ignore_case:
        flags |= regex.IGNORECASE
    try:
        return regex.compile(pattern, flags)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise ValidationFailed(
            f"Invalid regular expression: {exc}", details={"field": "pattern", "reason": str(exc)}
        ) from None


def _iter_text_buffers(output: ToolOutput) -> Iterator[tuple[str, int]]:
    """(decoded text, number of its first line), a few MiB at a time, split after newlines.

    A line longer than GREP_MAX_LINE_BYTES is handed over in pieces (cut on a
    character boundary); the next piece then starts with the same line number.
    """
    carry = b""
    line = 1
    pieces: list[bytes] = []
    size = 0
    for chunk in iter_chunks(output.pk, 0, max_batch=GREP_BUFFER_CHUNKS):
        pieces.append(chunk.data)
        size += len(chunk.data)
        if size < GREP_BUFFER_CHUNKS * CHUNK_BYTES:
            continue
        data = carry + b"".join(pieces)
        pieces, size = [], 0
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) <= GREP_MAX_LINE_BYTES:
                carry = data
                continue
            cut = _char_boundary(data, GREP_MAX_LINE_BYTES)
        yield data[:cut].decode("utf-8", errors="replace"), line
        line += data.count(b"\n", 0, cut)
        carry = data[cut:]
    data = carry + b"".join(pieces)
    if data:
        yield data.decode("utf-8", errors="replace"), line


def _char_boundary(data: bytes, at: int) -> int:
    """``at`` moved back over UTF-8 continuation bytes (at most 3)."""
    pos = at
    while pos > at - 3 and pos > 0 and 0x80 <= data[pos] < 0xC0:
        pos -= 1
    return pos


@dataclass(slots=True)
class _Match:
    line: int
    text: str
    before: list[dict[str, Any]]
    after: list[dict[str, Any]] = field(default_factory=list)
    after_needed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "text": self.text, "before": self.before, "after": self.after}


def _show(text: str) -> str:
    if text.endswith("\r"):
        text = text[:-1]
    return text if len(text) <= GREP_LINE_CHARS else text[:GREP_LINE_CHARS] + CUT_MARK


def _lines_forward(text: str, pos: int, first_number: int, n: int) -> list[dict[str, Any]]:
    """Up to ``n`` whole lines of ``text`` starting at ``pos`` (a line start)."""
    out = []
    number = first_number
    while len(out) < n and pos < len(text):
        nl = text.find("\n", pos)
        if nl == -1:
            out.append({"line": number, "text": _show(text[pos:])})
            break
        out.append({"line": number, "text": _show(text[pos:nl])})
        number += 1
        pos = nl + 1
    return out


def _lines_backward(text: str, line_start: int, number: int, n: int) -> list[dict[str, Any]]:
    """Up to ``n`` lines before the line starting at ``line_start`` (numbered ``number``)."""
    out: list[dict[str, Any]] = []
    end = line_start - 1  # the newline ending the previous line
    while len(out) < n and end >= 0:
        start = text.rfind("\n", 0, end) + 1
        number -= 1
        out.append({"line": number, "text": _show(text[start:end])})
        end = start - 1
    out.reverse()
    return out


def output_grep(
    output: ToolOutput,
    *,
    pattern: str,
    context: int = 0,
    max_matches: int = 100,
    ignore_case: bool = False,
    time_limit: float | None = None,
    start_line: int = 1,
) -> dict[str, Any]:
    """Lines matching ``pattern`` (``regex`` syntax), 1-based, with context lines.

    Matches before ``start_line`` are skipped (a capped answer continues there).

    Streams the output a few MiB at a time. A match is reported on the line it
    starts in when the pattern also matches inside that line alone (grep is
    line-based: a pattern that only matches across a newline does not count).
    The whole search has a time limit; the ``regex`` engine checks it while
    backtracking, so a catastrophic pattern is stopped and answered 422
    instead of hanging the worker (Python's ``re`` cannot be interrupted).
    """
    if not pattern:
        raise ValidationFailed("pattern must not be empty", details={"field": "pattern"})
    if max_matches <= 0:
        raise ValidationFailed("max_matches must be positive", details={"field": "max_matches"})
    if context < 0:
        raise ValidationFailed("context must not be negative", details={"field": "context"})
    rx = _compile(pattern, ignore_case)
    limit = settings.CONTEXTSVC_GREP_TIME_LIMIT_MS / 1000 if time_limit is None else time_limit
    deadline = time.monotonic() + limit

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _grep_timeout(limit)
        return left

    matches: list[_Match] = []
    waiting: list[_Match] = []  # matches whose after-context goes on in the next buffer
    tail: deque[dict[str, Any]] = deque(maxlen=max(context, 1))  # last lines of the previous buffer
    truncated = False
    last_line = 0
    searched_to = 0
    try:
        for text, first_line in _iter_text_buffers(output):
            if waiting:
                for m in waiting:
                    m.after.extend(
                        _lines_forward(text, 0, first_line, m.after_needed - len(m.after))
                    )
                waiting = [m for m in waiting if len(m.after) < m.after_needed]
            if truncated:
                if waiting:
                    continue
                break
            pos = 0
            counted_pos, counted_line = 0, first_line  # line number of ``counted_pos``
            while pos <= len(text):
                found = rx.search(text, pos, timeout=remaining())
                if found is None:
                    break
                start = found.start()
                if start == len(text) and (not text or text[-1] == "\n"):
                    break  # an empty match after the last newline: that line is the next buffer's
                line_start = text.rfind("\n", 0, start) + 1
                line_end = text.find("\n", start)
                if line_end == -1:
                    line_end = len(text)
                line_text = text[line_start:line_end]
                at_newline = start == line_end < len(text) and found.end() > start
                if found.end() > line_end or at_newline:
                    # The match runs over a newline: grep is line-based, so the
                    # line counts only if the pattern matches inside it alone.
                    if rx.search(line_text, timeout=remaining()) is None:
                        pos = start + 1
                        continue
                counted_line += text.count("\n", counted_pos, line_start)
                counted_pos = line_start
                number = counted_line
                pos = line_end + 1
                if number == last_line:  # another piece of one very long line
                    continue
                last_line = number
                if number < start_line:
                    continue
                before: list[dict[str, Any]] = []
                if context:
                    before = _lines_backward(text, line_start, number, context)
                    if len(before) < context:
                        first = before[0]["line"] if before else number
                        older = [t for t in tail if t["line"] < first]
                        before = older[max(0, len(older) - (context - len(before))) :] + before
                match = _Match(line=number, text=_show(line_text), before=before)
                if context:
                    match.after_needed = min(context, max(output.line_count - number, 0))
                    match.after = _lines_forward(text, line_end + 1, number + 1, match.after_needed)
                    if len(match.after) < match.after_needed:
                        waiting.append(match)
                matches.append(match)
                if len(matches) >= max_matches:
                    truncated = True
                    break
            newlines = text.count("\n")
            searched_to = first_line + newlines - (1 if text.endswith("\n") else 0)
            if context:
                # The buffer's last lines: before-context for a match early in the next one.
                if text.endswith("\n"):
                    tail.extend(_lines_backward(text, len(text), first_line + newlines, context))
                else:
                    tail.extend(
                        _lines_backward(text, len(text) + 1, first_line + newlines + 1, context)
                    )
    except TimeoutError:
        raise _grep_timeout(limit) from None
    found = [m.to_dict() for m in matches]
    return {
        "ref": output.ref,
        "pattern": pattern,
        "ignore_case": ignore_case,
        "context": context,
        "matches": found,
        "match_count": len(matches),
        "truncated": truncated,
        "searched_lines": min(searched_to, output.line_count),
        "total_lines": output.line_count,
        "text": grep_text(found),
    }


def grep_text(matches: Sequence[dict[str, Any]]) -> str:
    """grep -n style: ``N:match``, ``N-context``, groups separated by ``--``."""
    out: list[str] = []
    printed = 0
    for m in matches:
        group = [(b["line"], "-", b["text"]) for b in m["before"]]
        group.append((m["line"], ":", m["text"]))
        group.extend((a["line"], "-", a["text"]) for a in m["after"])
        fresh = [g for g in group if g[0] > printed]
        if not fresh:
            continue
        if out and fresh[0][0] > printed + 1:
            out.append("--")
        out.extend(f"{n}{sep}{text}" for n, sep, text in fresh)
        printed = fresh[-1][0]
    return "\n".join(out)


def _grep_timeout(limit: float) -> ValidationFailed:
    return ValidationFailed(
        f"The search exceeded its time limit of {limit:g} s (the pattern may backtrack "
        "catastrophically); use a simpler or more specific pattern",
        details={"field": "pattern", "reason": "timeout", "time_limit_seconds": limit},
    )
