"""The lines of a cut output that say where things are: kept with its head and tail.

A view cut to its first and last lines loses what sits in between, and the
line most worth keeping often does: "Full output saved to: /root/…/abc.txt"
(a client that offloaded the rest itself), "written to out/report.json", a
run id, a URL. The output stays stored and readable by ref, but only if the
agent knows what to look for. So a cut keeps, within its budget, the middle
lines that name a file, a path, an id or a URL, in their place and with their
line numbers; every run of lines left out is marked with its range.

Pure: lines in, numbered lines chosen, text out. Finding the lines costs
``str.find`` passes (C speed) over at most ``MAX_SCAN_CHARS`` of the middle and
a regex over a bounded number of candidate lines, so a 30 MB output costs about
what a 1 MB one does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from contextsvc.engine.retention import find_paths

# A kept middle line is at most this long (the rest of it is readable by ref).
MAX_KEPT_CHARS = 300
# At most this many middle lines, and this share of the cut's room, are kept.
MAX_KEPT_LINES = 12
MIDDLE_SHARE = 0.3
# Lines that only hold a path are at most this many of the kept lines: in a
# listing every line is one, and the head and tail say more than a sample.
MAX_PATH_LINES = 4
# Candidate lines read per pass (a bound on the regex work for a huge output).
MAX_CANDIDATES = 2_000
# Characters of a middle searched at most: its first and last halves of this
# (next to the kept head and tail); the rest of a huge output is read by ref.
MAX_SCAN_CHARS = 1_000_000

# A line that says where something went: "saved to <path>", "written to <path>"
# (with a path on the line), a URL, or an id with a value that looks like one
# (a digit in it: "id: 4f2a9c…", "run_id=20240101-7"; not "self.id = value").
_VERB_RE = re.compile(
    r"\b(?:saved|written|wrote|writing|stored|exported|dumped|logged|created|generated|"
    r"redirected|moved|copied|uploaded|persisted)\b[^\n]{0,40}?\b(?:to|in|at|as|into)\b",
    re.IGNORECASE,
)
_URL_RE = re.compile(r"\b(?:https?|file|s3|gs)://\S", re.IGNORECASE)
_ID_RE = re.compile(
    r"\b(?:id|uuid|ref|sha|hash|digest|commit|run|job|task|session|request|trace|build|"
    r"artifact|pid)(?:[ _-]?id)?[\"']?\s*[:=#]\s*[\"']?(?=[\w./:-]*\d)[\w./:-]{6,}",
    re.IGNORECASE,
)
_POINTER_HINTS = (
    "saved", "written", "wrote", "writing", "stored", "exported", "dumped", "logged",
    "created", "generated", "redirected", "moved", "copied", "uploaded", "persisted",
    "://", "id", "ref", "sha", "hash", "digest", "commit", "run", "job", "task",
    "session", "request", "trace", "build", "artifact", "pid",
)  # fmt: skip
_PATH_HINTS = ("/", ".")


@dataclass(frozen=True, slots=True)
class Pointer:
    """A middle line worth keeping: its 1-based number in the output and its text."""

    number: int
    text: str
    rank: int  # 0: says where something went (saved to, id, URL); 1: names a path


def _candidate_starts(lowered: str, start: int, end: int, hints: Sequence[str]) -> list[int]:
    """Starts of the lines in ``[start, end)`` holding one of ``hints`` (at most MAX_CANDIDATES)."""
    found: set[int] = set()
    for hint in hints:
        pos = lowered.find(hint, start, end)
        while pos != -1 and len(found) < MAX_CANDIDATES:
            found.add(max(lowered.rfind("\n", start, pos) + 1, start))
            nl = lowered.find("\n", pos, end)
            if nl == -1:
                break
            pos = lowered.find(hint, nl + 1, end)
    return sorted(found)


def find_pointers(text: str, start: int, end: int, first_number: int) -> list[Pointer]:
    """The lines of ``text[start:end]`` (``start`` begins line ``first_number``) that
    name where something is, in the order of ``text``: pointer lines, and lines naming
    a path (at most ``MAX_PATH_LINES`` of those, the first ones)."""
    if end <= start:
        return []
    if end - start > MAX_SCAN_CHARS:
        half = MAX_SCAN_CHARS // 2
        cut = text.rfind("\n", start, start + half)
        resume = text.find("\n", end - half, end) + 1
        if start < cut < resume:
            later = first_number + text.count("\n", start, resume)
            return [
                *find_pointers(text, start, cut, first_number),
                *find_pointers(text, resume, end, later),
            ]
    segment = text[start:end]
    lowered = segment.lower()
    if len(lowered) != len(segment):
        # A few characters lowercase to two ("İ"): positions must stay the text's.
        lowered = segment
    base = start
    found: dict[int, int] = {}  # line start (in ``lowered``) -> rank
    for pos in _candidate_starts(lowered, 0, len(lowered), _POINTER_HINTS):
        nl = lowered.find("\n", pos)
        line = text[base + pos : base + (len(lowered) if nl == -1 else nl)]
        if _URL_RE.search(line) or _ID_RE.search(line):
            found[pos] = 0
        elif _VERB_RE.search(line) and find_paths(line[:MAX_KEPT_CHARS]):
            found[pos] = 0
    paths = 0
    for pos in _candidate_starts(lowered, 0, len(lowered), _PATH_HINTS):
        if paths >= MAX_PATH_LINES:
            break
        if pos in found:
            continue
        nl = lowered.find("\n", pos)
        line = text[base + pos : base + (len(lowered) if nl == -1 else nl)]
        if find_paths(line[:MAX_KEPT_CHARS]):
            found[pos] = 1
            paths += 1
    out: list[Pointer] = []
    number, counted = first_number, 0
    for pos in sorted(found):
        number += lowered.count("\n", counted, pos)
        counted = pos
        nl = lowered.find("\n", pos)
        line = text[base + pos : base + (len(lowered) if nl == -1 else nl)]
        out.append(Pointer(number, line[:MAX_KEPT_CHARS], found[pos]))
    return out


def pointers_in_lines(lines: Sequence[str], first: int, last: int) -> list[Pointer]:
    """``find_pointers`` over ``lines[first:last]`` (0-based, numbered from ``first + 1``)."""
    if last <= first:
        return []
    text = "\n".join(lines[first:last])
    return find_pointers(text, 0, len(text), first + 1)


def choose_pointers(pointers: Sequence[Pointer], room_chars: int) -> list[Pointer]:
    """The pointers kept within ``room_chars``: the ones saying where something went
    first, then path lines, each in output order; at most ``MAX_KEPT_LINES``."""
    chosen: list[Pointer] = []
    used = 0
    for p in sorted(pointers, key=lambda p: (p.rank, p.number)):
        if len(chosen) >= MAX_KEPT_LINES:
            break
        cost = len(p.text) + 1 + 40  # the line and, at worst, a gap marker after it
        if used + cost > room_chars:
            continue
        chosen.append(p)
        used += cost
    return sorted(chosen, key=lambda p: p.number)


def gap_marker(first: int, last: int) -> str:
    """A later run of lines left out (the first one carries the full notice)."""
    return f"[… lines {first:,}-{last:,} cut]"
