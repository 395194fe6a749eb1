"""Ref reads and greps answered within CONTEXTSVC_REF_RESPONSE_MAX_BYTES, saying how to continue.

A slice caps its text in bytes and a grep its number of matches, but neither
bounds the JSON it answers: escapes (a control character is six bytes), the
grep's matches *and* its grep-style text, and up to 100 context lines per
match can make one answer megabytes, which an agent then pastes into its
context. Here the encoded answer is measured and cut to the cap, with
``truncated``, ``has_more``, ``next_offset`` and a ``message`` saying what to
ask next.
"""

from __future__ import annotations

from typing import Any

import orjson
from django.conf import settings

from ..models import ToolOutput
from . import grep, read

# The most one request may ask for: lines of a read, matches and context lines of a grep.
MAX_SLICE_LINES = 100_000
MAX_GREP_MATCHES = 1_000
MAX_GREP_CONTEXT = 100
# Left free under the cap for what wraps the answer (the built-in tool's
# envelope, the ``message`` added here).
ENVELOPE_BYTES = 1024
# The most JSON bytes one character can take (a control character: ``\u0000``).
MAX_JSON_BYTES_PER_CHAR = 6
_MAX_ROUNDS = 40


def response_cap() -> int:
    """The most bytes one ref read or grep answers (CONTEXTSVC_REF_RESPONSE_MAX_BYTES)."""
    return settings.CONTEXTSVC_REF_RESPONSE_MAX_BYTES


def _size(body: Any) -> int:
    return len(orjson.dumps(body))


def read_page(
    output: ToolOutput,
    *,
    offset: int,
    limit: int,
    max_line_length: int | None = None,
    char_offset: int = 0,
) -> dict[str, Any]:
    """``output_slice`` whose JSON fits the cap: fewer lines (or a cut line) when it would not.

    ``limit`` 0 is the default number of lines; ``char_offset`` pages inside
    the first line (``read.output_slice``).
    """
    limit = limit or read.DEFAULT_SLICE_LINES
    room = response_cap() - ENVELOPE_BYTES
    meta = _size({"ref": output.ref, "tool_name": output.tool_name}) + 400
    text_cap = max(room - meta, 256)
    lines, line_cap = limit, max_line_length

    # One read, capped by the text's size in JSON (escapes included): read again
    # only when the rest of the answer still overflows, or one line alone does.
    def read_capped() -> dict[str, Any]:
        return read.output_slice(
            output,
            offset=offset,
            limit=lines,
            max_line_length=line_cap,
            max_bytes=text_cap,
            json_bytes=True,
            char_offset=char_offset,
        )

    result = read_capped()
    capped = result["truncated"]
    rounds = 0
    while _size(result) > room and rounds < _MAX_ROUNDS:
        rounds += 1
        capped = True
        if result["lines"] > 1:
            lines = result["lines"] // 2  # what the text's cap leaves out (a long cut_lines)
        else:
            # One line alone is too big: cut it to what fits even if every
            # character is escaped (the rest: a narrower read or /raw).
            fit = text_cap // MAX_JSON_BYTES_PER_CHAR
            line_cap = fit if line_cap is None or line_cap > fit else max(1, line_cap // 2)
        result = read_capped()
    result["limit"] = limit
    result["truncated"] = capped
    inside = result["continue_line"]
    if capped:
        where = (
            f"read on with offset={result['next_offset']}"
            if result["next_offset"] is not None
            else "this is the end of the output"
        )
        result["message"] = (
            f"Answer capped at {response_cap():,} bytes after {result['lines']} line(s); {where}."
            + (
                " Cut lines are whole in the raw download (GET /api/v1/refs/{ref}/raw)."
                if result["cut_lines"]
                else ""
            )
        )
    if inside is not None:
        # docs/concepts/trimming.md#line-paging reads by line; a line longer than one read is paged
        # by character.
        result["message"] = (
            (result.get("message") or "")
            + f" Line {inside['offset']} goes on past character {inside['char_offset']:,}:"
            f" read more of it with offset={inside['offset']},"
            f" char_offset={inside['char_offset']}."
        ).strip()
    return result


def grep_page(
    output: ToolOutput,
    *,
    pattern: str,
    context: int = 0,
    max_matches: int = 100,
    ignore_case: bool = False,
    start_line: int = 1,
) -> dict[str, Any]:
    """``output_grep`` whose JSON fits the cap: the first matches that fit, then how to go on."""
    result = grep.output_grep(
        output,
        pattern=pattern,
        context=context,
        max_matches=max_matches,
        ignore_case=ignore_case,
        start_line=start_line,
    )
    room = response_cap() - ENVELOPE_BYTES
    result["start_line"] = start_line
    capped = _size(result) > room
    if capped:
        matches = result["matches"]
        base = _size({**result, "matches": [], "text": ""}) + 64
        kept: list[dict[str, Any]] = []
        used = base
        for m in matches:
            # A match shows twice: in ``matches`` and in the grep-style ``text``.
            cost = 2 * _size(m) + 16
            if used + cost > room:
                break
            kept.append(m)
            used += cost
        if not kept:
            kept = [_shrink(matches[0], room - base)]
        _set_matches(result, kept)
        while _size(result) > room and len(kept) > 1:
            kept.pop()
            _set_matches(result, kept)
    matches = result["matches"]
    more = capped or result["truncated"]
    result["truncated"] = more
    result["has_more"] = more and bool(matches)
    result["next_offset"] = matches[-1]["line"] + 1 if result["has_more"] else None
    if more and matches:
        why = (
            f"answer capped at {response_cap():,} bytes"
            if capped
            else f"max_matches={max_matches} reached"
        )
        result["message"] = (
            f"Showing {len(matches)} match(es) ({why}); continue with"
            f" start_line={result['next_offset']}, or narrow the pattern"
            + (" or lower context" if context else "")
            + "."
        )
    return result


def _set_matches(result: dict[str, Any], matches: list[dict[str, Any]]) -> None:
    result["matches"] = matches
    result["match_count"] = len(matches)
    result["text"] = grep.grep_text(matches)


def _shrink(match: dict[str, Any], room: int) -> dict[str, Any]:
    """One match too big on its own: no context, its line cut to what fits (it shows twice)."""
    chars = max(1, (room - 64) // (2 * MAX_JSON_BYTES_PER_CHAR))
    text = match["text"]
    if len(text) > chars:
        text = text[:chars] + read.CUT_MARK
    return {"line": match["line"], "text": text, "before": [], "after": []}
