"""What a session's previous build made of its history, so the next build does only the new part.

An agent's history grows by appends: before every call, the build walks the
whole window through ``engine.wellformed`` (pairing, ids, orphans) and, for
Anthropic, folds it into alternating turns (``engine.anthropic_turns``). Both
are forward scans whose output for a prefix is final once nothing in it waits
for a later message, so a ``HistoryMemo`` keeps, per session:

- the well-formed emission of the longest *settled* input prefix (every call in
  it answered inside it, ``wellformed.Emitted``), with the call ids it holds;
- the Anthropic turns before the newest user or assistant one (a later message
  merges only into the last turn, and the build marks and ends only the newest
  ones), in their final form (a string posted as one given back);
- per format whose messages convert one by one (Chat Completions messages,
  Responses items), the request history last converted and its items, so a
  build converts (or looks up) only the messages past it.

A memo is used only when the new input starts with exactly what it remembers,
compared element by element (the same objects, which the context cache hands
out while only appends happen, compare by identity; a changed message — an
edit, a trim, a compaction, a window restart — is another object, and a build
from a different window starts over). The output is the same as without a memo:
``tests/engine/test_history_memo.py`` builds both ways.

Turns remembered are shared by the bodies of later builds: whoever changes one
replaces it with a changed copy, as for the blocks (``providers.history``).
Pure: no Django; the caller keeps one memo per session (``prompting.context``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .anthropic_turns import add_turn, restore_strings
from .messages import Message
from .wellformed import CallIds, Emitted, calls_as_text, emit_paired, leading_user_turn


@dataclass(slots=True)
class _Paired:
    tools: bool
    inputs: list[Message]  # the settled input prefix
    out: list[Message]  # its emission
    taken: set[str]  # the call ids that emission holds


@dataclass(slots=True)
class _Turns:
    mid_system: bool
    history: list[Message]  # the request history before the last turn's first message
    closed: list[dict[str, Any]]  # its turns, final


@dataclass(slots=True)
class _Converted:
    history: list[Message]  # the request history last converted
    items: list[Any]  # its items, in order


@dataclass(slots=True)
class HistoryMemo:
    """One session's memo (module doc). It serves one build at a time: the caller hands
    it out and takes it back (a concurrent build of the session gets none)."""

    paired: _Paired | None = None
    turns: _Turns | None = None
    converted: dict[str, _Converted] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Messages and turns held: the weight of a memo in a bounded cache."""
        held = 0
        if self.paired is not None:
            held += len(self.paired.inputs) + len(self.paired.out)
        if self.turns is not None:
            held += len(self.turns.history) + len(self.turns.closed)
        for kept in self.converted.values():
            held += len(kept.history) + len(kept.items)
        return held

    def items(
        self, key: str, history: Sequence[Message], convert: Callable[[Message], Sequence[Any]]
    ) -> list[Any]:
        """Every message's ``convert(message)`` in one list, converting only the messages
        past the remembered prefix of ``history`` (``key``: the format).

        Each message converts on its own, so a prefix's items are final. The list
        is the caller's; the items in it are shared with later builds (module doc).
        """
        kept = self.converted.get(key)
        if kept is not None and _starts_with(history, kept.history):
            start, items = len(kept.history), list(kept.items)
        else:
            start, items = 0, []
        for msg in history[start:]:
            items.extend(convert(msg))
        self.converted[key] = _Converted(history=list(history), items=items[:])
        return items

    def well_formed(self, messages: Sequence[Message], *, tools: bool) -> list[Message]:
        """``wellformed.well_formed(messages, tools=tools)``, emitting only past the
        remembered prefix."""
        kept = self.paired
        if kept is not None and (kept.tools != tools or not _starts_with(messages, kept.inputs)):
            kept = None
        start = len(kept.inputs) if kept is not None else 0
        taken = kept.taken if kept is not None else set()
        if tools:
            emitted = emit_paired(messages[start:], CallIds(taken))
        else:  # each message stands alone: everything is settled
            text = calls_as_text(messages[start:])
            emitted = Emitted(text, [], len(messages) - start, len(text), 0)
        prefix = kept.out if kept is not None else []
        out = [*prefix, *emitted.out]
        if kept is None or emitted.settled:
            taken.update(emitted.ids[: emitted.settled_ids])
            self.paired = _Paired(
                tools=tools,
                inputs=list(messages[: start + emitted.settled]),
                out=out[: len(prefix) + emitted.settled_out],
                taken=taken,
            )
        return leading_user_turn(out)

    def anthropic_turns(
        self, history: Sequence[Message], *, mid_system: bool
    ) -> tuple[list[dict[str, Any]], set[int]]:
        """The turns of ``history`` (``anthropic_turns.add_turn`` over it) and the indexes
        of those still to ``restore_strings``; the turns before the last are final
        and may be shared with other builds (module doc)."""
        kept = self.turns
        if (
            kept is None
            or kept.mid_system != mid_system
            # The last turn's first message must be there again: it opens a
            # turn, so nothing merges into a remembered one.
            or len(history) <= len(kept.history)
            or not _starts_with(history, kept.history)
        ):
            kept = _Turns(mid_system=mid_system, history=[], closed=[])
        messages = list(kept.closed)
        strings: set[int] = set()
        starts: dict[int, int] = {}  # turn index → the history index that opened it
        for i in range(len(kept.history), len(history)):
            before = len(messages)
            add_turn(messages, strings, history[i], mid_system=mid_system)
            if len(messages) > before:
                starts[before] = i
        # Final now: the turns before the newest user or assistant one (the
        # build marks that one, and ends on the last; a later message merges
        # only into the last).
        closing = last_marked_turn(messages)
        if closing is not None and closing > len(kept.closed):
            done = {i for i in strings if i < closing}
            restore_strings(messages, done)
            strings -= done
            self.turns = _Turns(
                mid_system=mid_system,
                history=list(history[: starts[closing]]),
                closed=messages[:closing],
            )
        return messages, strings


def converted(
    memo: HistoryMemo | None,
    key: str,
    history: Sequence[Message],
    convert: Callable[[Message], Sequence[Any]],
) -> list[Any]:
    """Every history message's ``convert`` items in one list of the caller's: with a
    session's memo, only the messages past its last build's history are looked at."""
    if memo is not None:
        return memo.items(key, history, convert)
    return [item for msg in history for item in convert(msg)]


def last_marked_turn(messages: Sequence[dict[str, Any]]) -> int | None:
    """The index of the last turn that is not a ``system`` message (the one the build
    marks): a backward scan, over the trailing system turns only."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] != "system":
            return i
    return None


def _starts_with(items: Sequence[Message], prefix: list[Message]) -> bool:
    """Whether ``items`` begins with ``prefix``: identity first, then equality (a list
    comparison in C, so a window of the same objects costs microseconds)."""
    n = len(prefix)
    if len(items) < n:
        return False
    head = items[:n]
    return (head if isinstance(head, list) else list(head)) == prefix
