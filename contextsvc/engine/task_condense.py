"""A task too big to pin verbatim, condensed so that every identifier it names stays.

An agent's first message is often a worked demonstration plus the task: a long
transcript of commands, outputs and file listings. When it takes more than its
share of the history room it cannot stay whole, and a plain head-and-tail cut
drops its middle — with the paths, names and numbers only the middle names
(what the agent acts on next names exactly those). So the condensed task
keeps, in the text's own order:

1. its opening and closing lines (a problem statement opens it, the
   instructions close it), a core share of the budget each;
2. for every identifier (a path, a dotted / snake / camel name, a number of
   three digits or more, a short quoted string) not yet kept, the cheapest
   line naming it — most specific identifiers first (more distinct
   characters: a long path before ``x.py``, a name before ``123``) — then the
   same for its long plain words (a product, a team, a concept it turns on);
3. more opening and closing lines with whatever budget is left.

Omitted runs become ``[…]``; a notice heads the text. A line longer than
``MAX_UNIT_CHARS`` is split at spaces first, so one huge line (a one-line task,
a pip log line) costs only the piece that names something. Deterministic and
pure: the same task and budget give the same text, so the pinned slot stays
in the cached prefix.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Units of selection: lines, longer ones split at spaces into pieces this long.
MAX_UNIT_CHARS = 240
# Budget shares of the opening and closing lines kept before any identifier line.
HEAD_CORE = 0.25
TAIL_CORE = 0.15
# Of what is left after the identifier lines, the opening lines get this share.
HEAD_SHARE = 0.6
# Plain words this long are kept too, after every identifier.
LONG_WORD = 7
# Identifiers longer than this (a base64 blob, a minified line) are not covered.
MAX_IDENT_CHARS = 160
GAP = "[…]"
NOTICE = (
    "[Condensed to fit the context window: {kept:,} of {total:,} lines kept: the opening"
    " and closing lines and a line for each path, name, number, quoted string and long word;"
    " {gap} marks omitted lines.]"
)

_WORD = re.compile(r"[~./]*[A-Za-z_][\w.@+/~-]*")
_MARK = re.compile(r"[_./\-0-9]|[a-z][A-Z]")
_NUMBER = re.compile(r"(?<![\w.])\d{3,}(?![\w])")
_QUOTED = re.compile(r"(?<![\w\\])([\"'`])([^\"'`\n]{3,60}?)\1")
_EDGE = ".,:;-/~"


def task_identifiers(text: str) -> list[str]:
    """The identifiers ``text`` names, most specific first (distinct characters,
    then length, then first occurrence); its long plain words (lower-cased) after
    them."""
    found: dict[str, tuple[int, int]] = {}
    for at, ident, tier in _scan(text):
        found.setdefault(ident, (tier, at))
    return sorted(found, key=lambda w: _rank(w, *found[w]))


def _rank(word: str, tier: int, at: int) -> tuple[int, int, int, int]:
    return (tier, -len(set(word)), -len(word), at)


def _scan(text: str) -> list[tuple[int, str, int]]:
    """(offset, identifier, tier): tier 0 the names, paths, numbers and quoted
    strings; tier 1 the plain words of ``LONG_WORD`` letters or more, lower-cased
    (the task's own vocabulary: a product, a team, a concept it turns on)."""
    out = []
    for m in _WORD.finditer(text):
        word = m.group(0).strip(_EDGE)
        if 4 <= len(word) <= MAX_IDENT_CHARS and _MARK.search(word):
            out.append((m.start(), word, 0))
        elif len(word) >= LONG_WORD and word.isalpha():
            out.append((m.start(), word.lower(), 1))
    out.extend((m.start(), m.group(0), 0) for m in _NUMBER.finditer(text))
    for m in _QUOTED.finditer(text):
        inner = m.group(2)
        if inner.strip() == inner and any(c.isalnum() for c in inner):
            out.append((m.start(2), inner, 0))
    return out


def _units(text: str) -> tuple[list[str], list[int]]:
    """(the lines, long ones split at spaces into pieces; the line of each piece)."""
    units: list[str] = []
    line_of: list[int] = []
    for n, line in enumerate(text.split("\n")):
        while len(line) > MAX_UNIT_CHARS:
            cut = line.rfind(" ", MAX_UNIT_CHARS // 2, MAX_UNIT_CHARS)
            if cut < 0:
                cut = line.find(" ", MAX_UNIT_CHARS)
            if cut < 0:
                break
            units.append(line[:cut])
            line_of.append(n)
            line = line[cut + 1 :]
        units.append(line)
        line_of.append(n)
    return units, line_of


def _cover_plan(units: list[str]) -> tuple[list[set[str]], list[tuple[str, int]]]:
    """(the identifiers of each unit; each identifier of the text in rank order,
    with the cheapest unit naming it — the earliest of equal ones)."""
    names: list[set[str]] = []
    first: dict[str, tuple[int, int]] = {}
    where: dict[str, list[int]] = {}
    for i, unit in enumerate(units):
        found = set()
        for _, ident, tier in _scan(unit):
            found.add(ident)
            if ident not in where:
                first[ident] = (tier, i)
                where[ident] = []
            if not where[ident] or where[ident][-1] != i:
                where[ident].append(i)
        names.append(found)
    ranked = sorted(where, key=lambda w: _rank(w, *first[w]))
    return names, [(w, min(where[w], key=lambda i: (len(units[i]), i))) for w in ranked]


def _select(
    units: list[str], names: list[set[str]], plan: list[tuple[str, int]], budget: int
) -> set[int]:
    """The indexes of the units to keep within ``budget`` characters (module doc)."""
    chosen: set[int] = set()
    spent = 0
    # Each kept unit adds at most one gap marker (it splits one omitted run).
    gap_cost = len(GAP) + 1

    def take(i: int) -> bool:
        nonlocal spent
        cost = len(units[i]) + 1 + gap_cost
        if i not in chosen and spent + cost > budget:
            return False
        if i not in chosen:
            chosen.add(i)
            spent += cost
        return True

    def extend(order: range, amount: float) -> None:
        """Keep units in ``order`` while they fit ``amount`` more characters."""
        goal = spent + amount
        for i in order:
            if i not in chosen and (spent + len(units[i]) + 1 + gap_cost > goal or not take(i)):
                return

    n = len(units)
    extend(range(n), HEAD_CORE * budget)
    extend(range(n - 1, -1, -1), TAIL_CORE * budget)
    covered = set().union(*(names[i] for i in chosen))
    for ident, best in plan:
        if ident not in covered and take(best):
            covered |= names[best]
    extend(range(n), HEAD_SHARE * (budget - spent))
    extend(range(n - 1, -1, -1), budget - spent)
    extend(range(n), budget - spent)
    return chosen


def _render(units: list[str], line_of: list[int], chosen: set[int]) -> str:
    out = []
    gap = False
    for i, unit in enumerate(units):
        if i in chosen:
            out.append(unit)
            gap = False
        elif not gap:
            out.append(GAP)
            gap = True
    kept = len({line_of[i] for i in chosen})
    notice = NOTICE.format(kept=kept, total=line_of[-1] + 1, gap=GAP)
    return "\n".join([notice, *out])


def condense_task(text: str, max_tokens: int, count: Callable[[str], int]) -> str | None:
    """``text`` condensed to count at most ``max_tokens`` (``count``: the session's
    text estimate), keeping its identifiers (module doc); None when it already
    fits or when even the notice would not."""
    total = count(text)
    if total <= max_tokens:
        return None
    units, line_of = _units(text)
    lines = line_of[-1] + 1
    chars_per_token = max(1.0, len(text) / max(1, total))
    overhead = count(NOTICE.format(kept=lines, total=lines, gap=GAP)) + 2
    budget = max_tokens - overhead
    names, plan = _cover_plan(units)
    for _ in range(8):
        if budget <= 0:
            return None
        chosen = _select(units, names, plan, int(budget * chars_per_token))
        view = _render(units, line_of, chosen)
        if count(view) <= max_tokens:
            return view
        budget = int(budget * 0.9)
    return None
