"""The recall index's text, engine side: segments of whole lines, and matching them.

What ``sessions.recall`` stores and searches (docs/tool-output-cache.md, "Reaching what
left the context"): a text cut into small segments of whole lines, each
knowing the number of its first line; the plain literals a regular
expression must contain (what the trigram index looks up); the lines of a
segment a search matches, with a snippet around each match.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# --- segments: what the search index holds ------------------------------------------

# A segment is at most this many characters of whole lines (a longer line is
# cut into pieces that keep its number). Small, so the index's candidates are
# few and each re-check reads 2 KiB (bench_recall: a term found in many
# outputs p99 124 -> 38 ms against 4 KiB, for 14 % more index).
SEGMENT_CHARS = 2048
SNIPPET_CHARS = 300  # a hit's line is shown up to this, around the match
MIN_LITERAL = 3  # the index finds candidates by trigrams: a literal needs 3 characters


@dataclass(frozen=True, slots=True)
class Segment:
    first_line: int  # 1-based number of the segment's first line
    text: str


def split_segments(text: str, *, max_chars: int = SEGMENT_CHARS) -> list[Segment]:
    """``text`` as segments of whole lines of at most ``max_chars`` characters, in order.

    Joined back together they give ``text``. A line longer than ``max_chars``
    becomes several segments, each numbered with that line.
    """
    out: list[Segment] = []
    pos, line, size = 0, 1, len(text)
    while pos < size:
        end = pos + max_chars
        if end >= size:
            out.append(Segment(line, text[pos:]))
            break
        cut = text.rfind("\n", pos, end)
        if cut < pos:  # one line longer than a segment: a piece of it
            out.append(Segment(line, text[pos:end]))
            pos = end
            continue
        out.append(Segment(line, text[pos : cut + 1]))
        line += text.count("\n", pos, cut + 1)
        pos = cut + 1
    return out


# --- matching ----------------------------------------------------------------------

_META = set(".^$*+?{}[]()|\\")
_QUANTIFIERS = set("*?{")  # make the character before them optional
_CLASS_ESCAPES = set("dDwWsSbBAZzGNpPXRhHvV")


def required_literals(pattern: str) -> list[str]:
    """Runs of plain characters every match of the regex ``pattern`` must contain.

    Conservative: only the top level of the pattern is read (groups, classes
    and escapes that stand for several characters end a run); a pattern with
    a top-level ``|`` has none. The index narrows candidates with them; the
    real regex then decides, so a literal missed only costs speed.
    """
    if _top_level_alternation(pattern):
        return []
    runs: list[str] = []
    run: list[str] = []
    i, n = 0, len(pattern)

    def close() -> None:
        if run:
            runs.append("".join(run))
            run.clear()

    while i < n:
        ch = pattern[i]
        nxt = pattern[i + 1] if i + 1 < n else ""
        if ch == "\\" and nxt:
            if nxt.isalnum() and (nxt in _CLASS_ESCAPES or nxt.isdigit() or nxt in "xuUNo0"):
                close()
                i += 2
                continue
            literal, width = (nxt if not nxt.isalnum() else _plain_escape(nxt)), 2
        elif ch in _META:
            if ch in _QUANTIFIERS or ch == "+":
                # x* and x? make x optional; x+ keeps one x but ends the run.
                if ch != "+" and run:
                    run.pop()
                close()
                i += _skip_quantifier(pattern, i)
                continue
            close()
            i += _skip_group_or_class(pattern, i)
            continue
        else:
            literal, width = ch, 1
        if literal is None:
            close()
        else:
            after = pattern[i + width] if i + width < n else ""
            if after in ("*", "?") or (after == "{" and _is_quantifier(pattern, i + width)):
                close()  # optional: not required
            else:
                run.append(literal)
        i += width
    close()
    return [r for r in runs if len(r) >= MIN_LITERAL]


def _plain_escape(ch: str) -> str | None:
    return {"n": "\n", "t": "\t", "r": "\r", "f": "\f"}.get(ch)


def _is_quantifier(pattern: str, i: int) -> bool:
    return re.match(r"\{\d*,?\d*\}", pattern[i:]) is not None


def _skip_quantifier(pattern: str, i: int) -> int:
    if pattern[i] == "{":
        found = re.match(r"\{\d*,?\d*\}[?+]?", pattern[i:])
        return len(found.group(0)) if found else 1
    return 2 if i + 1 < len(pattern) and pattern[i + 1] in "?+" else 1


def _skip_group_or_class(pattern: str, i: int) -> int:
    """Width of the group or class at ``i`` (the whole of it), or 1 for ``^ $ . |``."""
    ch = pattern[i]
    if ch not in "([":
        return 1
    depth, j, n = 0, i, len(pattern)
    in_class = False
    while j < n:
        c = pattern[j]
        if c == "\\":
            j += 2
            continue
        if in_class:
            if c == "]" and j > i + 1:
                in_class = False
                if ch == "[":
                    return j - i + 1
        elif c == "[":
            in_class = True
            if j + 1 < n and pattern[j + 1] == "]":
                j += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j - i + 1
        j += 1
    return n - i


def _top_level_alternation(pattern: str) -> bool:
    depth, i, n, in_class = 0, 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        i += 1
    return False


def snippet(line: str, start: int, end: int, width: int = SNIPPET_CHARS) -> str:
    """``line`` clipped to ``width`` characters around the match ``start:end``."""
    line = line.rstrip("\r\n")
    if len(line) <= width:
        return line
    middle = (start + end) // 2
    lo = max(0, min(middle - width // 2, len(line) - width))
    hi = lo + width
    return ("…" if lo else "") + line[lo:hi] + ("…" if hi < len(line) else "")


@dataclass(frozen=True, slots=True)
class LineHit:
    line: int
    snippet: str


def line_hits(
    segment: Segment, search: Callable[[str, int], tuple[int, int] | None], *, after_line: int = 0
) -> list[LineHit]:
    """The lines of ``segment`` where ``search(text, pos)`` finds a match, one hit per line.

    ``search`` returns the (start, end) of the next match at or after ``pos``,
    or None. Grep is line-based: a match is reported on the line it starts in.
    Lines numbered ``after_line`` or lower are skipped (a page's continuation).
    """
    text = segment.text
    hits: list[LineHit] = []
    pos = 0
    line = segment.first_line
    counted = 0
    while pos <= len(text):
        found = search(text, pos)
        if found is None:
            break
        start, end = found
        line += text.count("\n", counted, start)
        counted = start
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        if line_end == -1:
            line_end = len(text)
        if line > after_line:
            hits.append(
                LineHit(
                    line, snippet(text[line_start:line_end], start - line_start, end - line_start)
                )
            )
        pos = line_end + 1
    return hits
