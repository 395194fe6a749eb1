"""Compaction never loses the newest mid-conversation system instructions.

A client may place a ``system`` message inside its history (Claude Code puts
one after the first user turn). Compaction summarises or drops the oldest
turns, which would take that instruction with them, so after every chain run
the newest system message of the window it started from must still be sent:
either it is still in the live window, verbatim, or its text is carried above
the summary, verbatim, as a marked block at the top of ``retain`` (the
preamble sends retain first, spec 000 §2.7). A later compaction keeps the
carried block (a summariser rewrites retain) until a newer system message
takes its place, and drops it once a newer one is in the window.
"""

from __future__ import annotations

from collections.abc import Sequence

from .messages import Message

CARRY_OPEN = "[System instructions in force, from earlier in this conversation]"
CARRY_CLOSE = "[End of system instructions]"


def split_carried(retain: str) -> tuple[str | None, str]:
    """(carried system text or None, the rest of ``retain``)."""
    if not retain.startswith(CARRY_OPEN + "\n"):
        return None, retain
    end = retain.find("\n" + CARRY_CLOSE, len(CARRY_OPEN))
    if end < 0:
        return None, retain
    text = retain[len(CARRY_OPEN) + 1 : end]
    return text, retain[end + len(CARRY_CLOSE) + 1 :].lstrip("\n")


def with_carried(retain: str, text: str | None) -> str:
    """``retain`` with ``text`` as its carried block (none when ``text`` is None)."""
    _, rest = split_carried(retain)
    if text is None:
        return rest
    block = f"{CARRY_OPEN}\n{text}\n{CARRY_CLOSE}"
    return f"{block}\n\n{rest}" if rest else block


def _same(a: Message, b: Message) -> bool:
    if a.seq is not None or b.seq is not None:
        return a.seq == b.seq
    return a is b or (a.role == b.role and a.content == b.content)


def carry_system(
    before: Sequence[Message], before_retain: str, after: Sequence[Message], after_retain: str
) -> str:
    """The compacted window's retain, carrying the newest system instructions (module doc).

    ``before`` / ``before_retain``: the window compaction started from;
    ``after`` / ``after_retain``: what the strategies made of it.
    """
    newest = next((m for m in reversed(before) if m.role == "system"), None)
    if newest is None:
        text, _ = split_carried(before_retain)
    elif any(m.role == "system" and _same(m, newest) for m in after):
        text = None
    else:
        text = newest.text
    return with_carried(after_retain, text)
