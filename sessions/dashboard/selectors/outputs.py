"""The inspector's output viewer: line ranges and grep of a stored tool output.

Reads through the same store functions the agent's read and grep tools use
(``GET /refs/{ref}``, ``GET /refs/{ref}/grep``), so the operator sees what the
agent can read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import regex
from django.http import Http404

from sessions.models import Session, ToolOutput
from sessions.outputs.grep import output_grep
from sessions.outputs.read import CUT_MARK, output_slice

OUTPUT_PAGE_LINES = 200
OUTPUT_LINE_CHARS = 2000  # a line longer than this is cut in the viewer (spec 000 §1.3's default)
GREP_MAX_MATCHES = 200
HIGHLIGHT_TIMEOUT = 0.5  # seconds for all highlighting of one grep answer


def output_for_operator(session: Session, ref: str) -> ToolOutput:
    """A stored (complete) output of the session, or 404."""
    output = ToolOutput.objects.filter(session=session, ref=ref, sha256__isnull=False).first()
    if output is None:
        raise Http404("No such output")
    return output


@dataclass(frozen=True, slots=True)
class OutputLine:
    number: int
    text: str
    cut: bool = False
    target: bool = False


def _parse_slice_text(text: str, cut_lines: Iterable[int], target: int | None) -> list[OutputLine]:
    """``output_slice`` numbers lines like a read tool (``"{n:>6}\\t{text}"``); split them back."""
    cut = set(cut_lines)
    lines = []
    for entry in text.split("\n") if text else ():
        number, _, body = entry.partition("\t")
        n = int(number)
        if n in cut and body.endswith(CUT_MARK):
            body = body[: -len(CUT_MARK)]
        lines.append(OutputLine(number=n, text=body, cut=n in cut, target=n == target))
    return lines


def output_lines(
    output: ToolOutput,
    *,
    offset: int = 1,
    limit: int = OUTPUT_PAGE_LINES,
    target: int | None = None,
) -> dict[str, Any]:
    """A line range through ``outputs.read.output_slice`` (what ``GET /refs/{ref}`` serves)."""
    result = output_slice(output, offset=offset, limit=limit, max_line_length=OUTPUT_LINE_CHARS)
    lines = _parse_slice_text(result["text"], result["cut_lines"], target)
    first = lines[0].number if lines else result["offset"]
    return {
        **result,
        "line_rows": lines,
        "first": first,
        "last": lines[-1].number if lines else first - 1,
        "prev_offset": max(1, first - limit) if first > 1 else None,
        "target": target,
    }


@dataclass(frozen=True, slots=True)
class GrepLine:
    number: int
    segments: list[tuple[str, bool]]  # (text, is a match)
    is_match: bool


def _highlight(text: str, rx: regex.Pattern, deadline: float) -> list[tuple[str, bool]]:
    segments: list[tuple[str, bool]] = []
    pos = 0
    try:
        for m in rx.finditer(text, timeout=max(0.001, deadline - time.monotonic())):
            if m.end() == m.start():
                continue
            if m.start() > pos:
                segments.append((text[pos : m.start()], False))
            segments.append((text[m.start() : m.end()], True))
            pos = m.end()
    except TimeoutError:
        pass  # highlighting is cosmetic: the lines themselves already matched
    if pos < len(text):
        segments.append((text[pos:], False))
    return segments or [("", False)]


def output_grep_view(
    output: ToolOutput,
    *,
    pattern: str,
    context: int = 2,
    ignore_case: bool = False,
    max_matches: int = GREP_MAX_MATCHES,
) -> dict[str, Any]:
    """Matches through ``outputs.grep.output_grep`` (what ``GET /refs/{ref}/grep`` serves),
    grouped like ``grep -n`` with the matched text marked."""
    result = output_grep(
        output, pattern=pattern, context=context, max_matches=max_matches, ignore_case=ignore_case
    )
    flags = regex.MULTILINE | (regex.IGNORECASE if ignore_case else 0)
    rx = regex.compile(pattern, flags)
    deadline = time.monotonic() + HIGHLIGHT_TIMEOUT
    groups: list[list[GrepLine]] = []
    printed = 0
    for m in result["matches"]:
        rows = [(b["line"], b["text"], False) for b in m["before"]]
        rows.append((m["line"], m["text"], True))
        rows.extend((a["line"], a["text"], False) for a in m["after"])
        if m["line"] <= printed and groups:
            # Already printed as context of the previous match: mark it there.
            last = groups[-1]
            for i, row in enumerate(last):
                if row.number == m["line"]:
                    last[i] = GrepLine(m["line"], _highlight(m["text"], rx, deadline), True)
        fresh = [r for r in rows if r[0] > printed]
        if not fresh:
            continue
        if not groups or fresh[0][0] > printed + 1:
            groups.append([])
        for number, text, is_match in fresh:
            segments = _highlight(text, rx, deadline) if is_match else [(text, False)]
            groups[-1].append(GrepLine(number=number, segments=segments, is_match=is_match))
        printed = fresh[-1][0]
    return {**result, "groups": groups}
