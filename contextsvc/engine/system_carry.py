"""Compaction never loses the newest mid-conversation system instructions.

A client may place ``system`` messages inside its history: Claude Code puts
its environment block after the first user turn and a short
``<total_tokens>… left`` note after each later one. Compaction summarises or
drops the oldest turns, which would take those instructions with them, so
after every chain run the newest system instruction *of each kind* must still
be sent: either it is still in the live window, verbatim, or its text is
carried above the summary, verbatim, in a marked block at the top of
``retain`` (the preamble sends retain first, docs/concepts/compaction.md#retain-summary).

A system message's kind is its first line with the digits taken out, so a
newer ``<total_tokens>`` note replaces an older one while the environment
block stays. A later compaction keeps the carried block (a summariser
rewrites retain); a kind whose newer message is in the live window leaves the
block. The block holds at most ``CARRY_MAX_CHARS`` characters: the newest
kinds first, whole messages only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .messages import Message

CARRY_OPEN = "[System instructions in force, from earlier in this conversation]"
CARRY_CLOSE = "[End of system instructions]"
# Between carried messages inside the block.
CARRY_SEPARATOR = "\n\n[Next system instruction]\n"
CARRY_MAX_CHARS = 16_000
_DIGITS = re.compile(r"\d+")


def split_carried(retain: str) -> tuple[list[str], str]:
    """(the carried system texts, oldest first; the rest of ``retain``)."""
    if not retain.startswith(CARRY_OPEN + "\n"):
        return [], retain
    end = retain.find("\n" + CARRY_CLOSE, len(CARRY_OPEN))
    if end < 0:
        return [], retain
    text = retain[len(CARRY_OPEN) + 1 : end]
    return text.split(CARRY_SEPARATOR), retain[end + len(CARRY_CLOSE) + 1 :].lstrip("\n")


def with_carried(retain: str, texts: Sequence[str]) -> str:
    """``retain`` with ``texts`` as its carried block (none when ``texts`` is empty)."""
    _, rest = split_carried(retain)
    if not texts:
        return rest
    block = f"{CARRY_OPEN}\n{CARRY_SEPARATOR.join(texts)}\n{CARRY_CLOSE}"
    return f"{block}\n\n{rest}" if rest else block


def kind(text: str) -> str:
    """What a system message is about: its first line, digits aside (module doc)."""
    first = text.strip().split("\n", 1)[0]
    return _DIGITS.sub("#", first).strip()


def carry_system(
    before: Sequence[Message], before_retain: str, after: Sequence[Message], after_retain: str
) -> str:
    """The compacted window's retain, carrying the newest system instructions (module doc).

    ``before`` / ``before_retain``: the window compaction started from;
    ``after`` / ``after_retain``: what the strategies made of it.
    """
    kept_seqs = {m.seq for m in after if m.seq is not None}
    kept_kinds = {kind(m.text) for m in after if m.role == "system"}
    candidates, _ = split_carried(before_retain)
    for msg in before:
        if msg.role == "system" and msg.text.strip():
            if msg.seq is None or msg.seq not in kept_seqs:
                candidates.append(msg.text)
    chosen: list[str] = []
    seen = set(kept_kinds)
    size = 0
    for text in reversed(candidates):  # newest first
        key = kind(text)
        if key in seen or size + len(text) > CARRY_MAX_CHARS:
            continue
        seen.add(key)
        chosen.append(text)
        size += len(text)
    return with_carried(after_retain, chosen[::-1])
