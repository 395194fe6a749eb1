"""Incremental compaction: a later summary covers only what left the window since
the last one, and is merged with the memory already there.

Re-summarising the earlier summary on every compaction costs its input again
each time and blurs it a little more each round (a summary of a summary of a
summary). Instead the summariser gets only the messages that leave the window
now; its retained facts are merged line by line with the ones already kept
(no duplicates, the earlier ones first), and its summary is appended to the
earlier one as a later part. The merged memory stays bounded: past its cap,
the oldest part loses its last lines first (the newest part is never clipped).
"""

from __future__ import annotations

from contextsvc.engine.system_carry import split_carried, with_carried

# Between the parts of a merged summary, oldest first.
PART_MARK = "[Later in the session]"
CLIPPED_NOTE = "(… the rest of this earlier part was clipped to keep the memory small)"
# Characters per token the cap assumes (the offline summariser writes ~3.5).
CHARS_PER_TOKEN = 3.5


FACTS_OPEN = "[Retained facts]"
FACTS_CLOSE = "[End of retained facts]"


def merge_retained(old: str, new: str, max_tokens: int | None = None) -> str:
    """The retained facts of both compactions: the earlier lines, then the new
    lines not already there (past ``max_tokens``, the earliest lines go). A
    carried system block stays at the top of ``old``."""
    carried, rest = split_carried(old)
    seen: set[str] = set()
    lines: list[str] = []
    for line in [*rest.split("\n"), *new.split("\n")]:
        key = line.strip()
        if not key or key in seen:
            continue
        seen.add(key)
        lines.append(line)
    if max_tokens is not None:
        cap = int(max_tokens * CHARS_PER_TOKEN)
        size = sum(len(line) + 1 for line in lines)
        while size > cap and len(lines) > 1:
            size -= len(lines.pop(0)) + 1
    merged = "\n".join(lines)
    return with_carried(merged, carried) if carried else merged


def join_facts(facts: str, body: str) -> str:
    """A summary slot holding retained facts (marked, so a later compaction can
    merge them) above the summary body: used when the retain slot is pinned."""
    if not facts.strip():
        return body
    return f"{FACTS_OPEN}\n{facts.strip()}\n{FACTS_CLOSE}\n\n{body}"


def split_facts(summary: str) -> tuple[str, str]:
    """(retained facts, body) of a summary slot written by ``join_facts``."""
    if not summary.startswith(FACTS_OPEN + "\n"):
        return "", summary
    end = summary.find("\n" + FACTS_CLOSE)
    if end < 0:
        return "", summary
    return summary[len(FACTS_OPEN) + 1 : end], summary[end + len(FACTS_CLOSE) + 1 :].lstrip("\n")


def merge_summaries(old: str, new: str, max_tokens: int) -> str:
    """``new`` appended to ``old`` as a later part; the whole kept under about
    ``max_tokens`` by clipping the oldest parts from their end."""
    if not old.strip():
        return new
    if not new.strip():
        return old
    parts = [p.strip("\n") for p in f"{old}\n\n{PART_MARK}\n{new}".split(f"\n{PART_MARK}\n")]
    cap = int(max_tokens * CHARS_PER_TOKEN)

    def size() -> int:
        return sum(len(p) for p in parts) + (len(PART_MARK) + 3) * (len(parts) - 1)

    while size() > cap and len(parts) > 1:
        lines = parts[0].split("\n")
        if lines and lines[-1] == CLIPPED_NOTE:
            lines.pop()
        excess = size() - cap + len(CLIPPED_NOTE) + 1
        while lines and excess > 0:
            excess -= len(lines.pop()) + 1
        if len(lines) <= 1:
            parts.pop(0)  # nothing left of it worth a header
            continue
        parts[0] = "\n".join([*lines, CLIPPED_NOTE])
    return f"\n\n{PART_MARK}\n".join(parts)
