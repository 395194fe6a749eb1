"""The inspector's output viewer: line ranges and grep of a stored tool output.

Reads through the same store functions the agent's read and grep tools use
(``GET /refs/{ref}``, ``GET /refs/{ref}/grep``), so the operator sees what the
agent can read.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import regex
from django.http import Http404

from sessions.models import Message, Session, ToolOutput
from sessions.outputs.grep import output_grep
from sessions.outputs.read import CUT_MARK, output_slice

OUTPUT_PAGE_LINES = 200
# a line longer than this is cut in the viewer (docs/concepts/trimming.md#cut-view)
OUTPUT_LINE_CHARS = 2000
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


# --- what a placeholder stands for ---------------------------------------------------------

_SHOWING = re.compile(r"showing lines 1-([\d,]+) of")
_ALL_SHOWN = re.compile(r"all ([\d,]+) lines shown")


@dataclass(frozen=True, slots=True)
class PlaceholderInfo:
    """A message's in-context view of a stored output, explained: the original
    sizes, what the view costs, why and when it was replaced, and (cut views)
    how many leading lines the model saw."""

    seq: int
    state: str  # full, cut, offloaded, trimmed, cleared, failed
    byte_size: int
    line_count: int
    tokens_before: int | None  # the output's view tokens before it was trimmed
    tokens_estimated: bool  # tokens_before is bytes/4 (trimmed before this was recorded)
    view_tokens: int
    reason: str
    detail: str
    at: datetime | None
    seen_lines: int | None  # None: not a cut view

    @property
    def saved(self) -> int | None:
        return None if self.tokens_before is None else max(0, self.tokens_before - self.view_tokens)


def seen_lines(view: str | None, line_count: int) -> int | None:
    """How many leading lines a cut view showed (from its notice,
    docs/concepts/trimming.md#cut-view)."""
    if not view:
        return None
    if m := _SHOWING.search(view):
        return int(m.group(1).replace(",", ""))
    if _ALL_SHOWN.search(view):
        return line_count
    if "no lines shown" in view:
        return 0
    return None


def _when(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def placeholder_info(session: Session, output: ToolOutput, seq: int) -> PlaceholderInfo | None:
    """The view of ``output`` in message ``seq``, when that message holds it: 1 query."""
    if not seq:
        return None
    msg = (
        Message.objects.filter(session=session, seq=seq, output_ref=output.ref)
        .only("seq", "view", "view_state", "token_count", "trim_info")
        .first()
    )
    if msg is None or msg.view_state == "full":
        return None
    info = msg.trim_info or {}
    before = info.get("tokens_before")
    return PlaceholderInfo(
        seq=msg.seq,
        state=msg.view_state,
        byte_size=output.byte_size,
        line_count=output.line_count,
        tokens_before=before if before is not None else -(-output.byte_size // 4),
        tokens_estimated=before is None,
        view_tokens=msg.token_count,
        reason=str(info.get("reason") or ""),
        detail=str(info.get("detail") or ""),
        at=_when(info.get("at")),
        seen_lines=seen_lines(msg.view, output.line_count) if msg.view_state == "cut" else None,
    )
