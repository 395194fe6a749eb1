"""A long history parsed from where it stopped matching the client's previous request.

An agent sends its whole history on every call, serialised the same way, so
the bytes of a request begin with the bytes of its previous request up to
(about) its last messages. The gate keeps, per conversation (``slot``), the
previous body's bytes, its parsed history and where each message of it ends
in those bytes. A new body whose bytes begin with the same first ``k``
messages takes their parsed objects as they are and parses only the rest,
in three pieces that are the whole body again:

- the fields before the history: ``raw[:start]`` closed with ``0}``;
- the new messages: ``[0`` and the bytes from the end of message ``k`` to
  the history's closing ``]`` (the parser is where it was at that offset:
  inside the array, after an element);
- the fields after the history: ``{`` and what follows the ``]``.

Each piece is parsed strictly (orjson), and together they are the whole body,
so the result is the one a full parse gives: the same values, the same key
order (a key's first place, its last value), and any body a full parse
refuses fails a piece too, and is then parsed whole to give the same error.
A field after the history with the history's own name (a duplicate key,
escaped or not) would replace it: such a body is parsed whole.

The shared messages are read, never changed, by everything after the gate
(as the context cache's messages are). A body is kept only after it passed
the gate, and only when its bytes are the UTF-8 JSON the full parse read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import orjson

from contextsvc.lru import BoundedLRU

from .object_prefix import note, remember, snapshot

# A JSON string, and a value nested up to ``_DEPTH`` levels, as one match each: the
# possessive forms never backtrack (a deeper message is walked token by token).
_STRING = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_DEPTH = 8


def _nested(depth: int) -> bytes:
    inner = rb'[\[{](?:[^\[\]{}"]++|' + _STRING + rb")*+[\]}]"
    for _ in range(depth - 1):
        inner = rb'[\[{](?:[^\[\]{}"]++|' + _STRING + rb"|" + inner + rb")*+[\]}]"
    return inner


_NESTED = re.compile(_nested(_DEPTH), re.DOTALL)
_SCALAR = re.compile(_STRING + rb'|[^\[\]{}",\s]++', re.DOTALL)
_TOKEN = re.compile(_STRING + rb"|[\[\]{},]", re.DOTALL)
_SPACE = re.compile(rb"[ \t\r\n]*+")


@dataclass(frozen=True, slots=True)
class Kept:
    """A body the gate passed: its bytes and its history (the body itself, not a copy of
    the bytes that matter: only those up to ``end`` are ever compared)."""

    raw: bytes
    start: int  # the offset of the history's ``[``
    ends: tuple[int, ...]  # per message, the offset just past its last byte
    messages: tuple[Any, ...]
    clean: bool = False  # True: ``raw`` holds no ``BodyReuse.watch`` (False: it may)

    @property
    def end(self) -> int:
        """Just past the history's last message (past its ``[`` when it has none)."""
        return self.ends[-1] if self.ends else self.start + 1


def history_start(raw: bytes, key: str) -> int | None:
    """The offset of the ``[`` of the top-level field ``key``, or None."""
    want = orjson.dumps(key)
    depth = 0
    last = None
    for token in _TOKEN.finditer(raw):
        char = raw[token.start()]
        if char == 0x22:  # a string: a key when a value follows
            last = token.group() if depth == 1 else None
            continue
        if char in (0x7B, 0x5B):  # { [
            depth += 1
            if depth == 2 and char == 0x5B and last == want:
                return token.start()
        elif char in (0x7D, 0x5D):
            depth -= 1
            if depth <= 0:
                return None
        last = None
    return None


def _value_end(raw: bytes, at: int) -> int | None:
    """The end of the JSON value starting at ``at`` (one match; a deeper one token by token)."""
    if raw[at] not in (0x7B, 0x5B):
        match = _SCALAR.match(raw, at)
        return match.end() if match is not None else None
    match = _NESTED.match(raw, at)
    if match is not None:
        return match.end()
    depth = 0
    for token in _TOKEN.finditer(raw, at):
        char = raw[token.start()]
        if char in (0x7B, 0x5B):
            depth += 1
        elif char in (0x7D, 0x5D):
            depth -= 1
            if depth == 0:
                return token.end()
    return None


def element_ends(raw: bytes, at: int) -> tuple[list[int], int] | None:
    """From ``at`` (an array's ``[``, or the end of one of its elements): where each element
    after it ends, and the offset of the array's ``]``. None if the bytes are not an array
    there (what a full parse then refuses, or reads another way)."""
    ends: list[int] = []
    first = raw[at : at + 1] == b"["
    pos = at + 1 if first else at
    while True:
        pos = _SPACE.match(raw, pos).end()  # type: ignore[union-attr]
        if pos >= len(raw):
            return None
        if not first or raw[pos] == 0x5D:  # after an element (or at an empty array's end)
            if raw[pos] == 0x5D:
                return ends, pos
            if raw[pos] != 0x2C:
                return None
            pos = _SPACE.match(raw, pos + 1).end()  # type: ignore[union-attr]
            if pos >= len(raw):
                return None
        first = False
        end = _value_end(raw, pos)
        if end is None:
            return None
        ends.append(end)
        pos = end


def kept(raw: bytes, body: dict[str, Any], key: str, watch: bytes = b"") -> Kept | None:
    """What to keep of a body the gate passed, or None when its history cannot be reused
    (``watch``: the bytes whose absence ``Kept.clean`` tells)."""
    history = body.get(key)
    if type(history) is not list and type(history) is not tuple:  # a kept one's: a tuple
        return None
    start = history_start(raw, key)
    if start is None:
        return None
    found = element_ends(raw, start)
    if found is None or len(found[0]) != len(history):
        return None
    ends, close = found
    if _fields_after(raw, close, key) is None:
        return None  # the history's name again after it (a duplicate key): that one is read
    clean = bool(watch) and watch not in raw
    return Kept(raw=raw, start=start, ends=tuple(ends), messages=snapshot(history), clean=clean)


def _fields_after(raw: bytes, close: int, key: str) -> dict[str, Any] | None:
    """The top-level fields after the history's closing ``]`` at ``close``; None when those
    bytes do not end the object strictly or name the history again."""
    rest = raw[_SPACE.match(raw, close + 1).end() :]  # type: ignore[union-attr]
    try:
        if rest[:1] == b",":  # more fields: a member must follow the comma
            tail = orjson.loads(b"{" + rest[1:])
            if type(tail) is not dict or not tail:
                return None
        elif rest[:1] == b"}":
            tail = orjson.loads(b"{" + rest)  # ``{}``, and nothing but space after it
        else:
            return None
    except orjson.JSONDecodeError:
        return None
    return tail if key not in tail else None


def _shared(raw: bytes, previous: Kept) -> int:
    """How many leading messages of ``previous`` the bytes of ``raw`` begin with."""
    ends = previous.ends
    view = memoryview(previous.raw)[: previous.end]  # compared in place, not copied
    if not ends or not raw.startswith(view[: ends[0]]):
        return 0
    if raw.startswith(view):
        return len(ends)
    low, high = 1, len(ends) - 1  # ``low`` messages are shared; is ``high``?
    step = 1
    while low < high:  # back from the end, doubling: a client changes its newest messages
        probe = max(high - step + 1, low + 1)
        if raw.startswith(view[: ends[probe - 1]]):
            low = probe
            break
        high, step = probe - 1, step * 2
    while low < high:  # then halving what is left
        mid = (low + high + 1) // 2
        if raw.startswith(view[: ends[mid - 1]]):
            low = mid
        else:
            high = mid - 1
    return low


def reparse(
    raw: bytes, key: str, previous: Kept, least: int, watch: bytes = b""
) -> tuple[dict[str, Any], Kept, int] | None:
    """``raw`` parsed with the messages it shares with ``previous`` reused (module doc), what
    to keep of it and how many messages it took; None when it shares fewer than ``least`` or
    a piece does not parse.
    ``watch`` is looked for only past the shared bytes when ``previous`` is clean of it."""
    shared = _shared(raw, previous)
    if shared < least:
        return None
    cut = previous.ends[shared - 1]
    found = element_ends(raw, cut)
    if found is None:
        return None
    close = found[1]
    tail = _fields_after(raw, close, key)
    if tail is None:
        return None
    try:
        head = orjson.loads(raw[: previous.start] + b"0}")
        new = orjson.loads(b"[0" + raw[cut : close + 1])
    except orjson.JSONDecodeError:
        return None
    if type(head) is not dict or len(new) - 1 != len(found[0]):
        return None
    history = [*previous.messages[:shared], *new[1:]]
    head[key] = history
    head.update(tail)
    ends = (*previous.ends[:shared], *found[0])
    messages = tuple(history)
    # The shared bytes are ``previous``'s: clean of it, only the rest can hold ``watch``.
    since = max(cut - len(watch) + 1, 0) if previous.clean else 0
    clean = bool(watch) and raw.find(watch, since) < 0
    kept_body = Kept(raw=raw, start=previous.start, ends=ends, messages=messages, clean=clean)
    return head, kept_body, shared


@dataclass(frozen=True, slots=True)
class Reused:
    """A body parsed with ``reused`` leading messages taken from ``previous`` (the slot's
    kept body, which passed the gate), and what to keep of it once it passes too."""

    kept: Kept
    previous: Kept
    reused: int


@dataclass(frozen=True, slots=True)
class Unscanned:
    """A body kept as it came, not yet scanned for where its messages end: that is done
    when its conversation's next request comes, so a body whose slot never comes again
    (a client whose first bytes change on every call) costs no scan."""

    raw: bytes
    messages: tuple[Any, ...]


class BodyReuse:
    """The kept bodies, one per slot (a conversation), bounded by the bytes they hold."""

    def __init__(self, *, slots: int, max_bytes: int, least: int, watch: bytes = b"") -> None:
        self.least = least  # fewer shared messages than this: parsed whole
        self.watch = watch  # bytes a kept body tells it is clean of (``Kept.clean``)
        self._kept: BoundedLRU[Hashable, Kept | Unscanned] = BoundedLRU(
            slots, max_weight=max_bytes, weigh=lambda k: len(k.raw)
        )

    def parse(
        self, raw: bytes, slot: Hashable, key: str, whole: Callable[[bytes], Any]
    ) -> tuple[Any, Reused | None]:
        """The body of ``raw`` (``whole`` parses it when nothing is reused), and what was
        reused and is to be kept once it passed the gate (None: worked out then, ``keep``)."""
        previous = self._previous(slot, key)
        if previous is not None:
            reparsed = reparse(raw, key, previous, self.least, self.watch)
            if reparsed is not None:
                body, kept_body, shared = reparsed
                return body, Reused(kept=kept_body, previous=previous, reused=shared)
        return whole(raw), None

    def _previous(self, slot: Hashable, key: str) -> Kept | None:
        """The slot's kept body, scanned now if it was not yet (``Unscanned``)."""
        previous = self._kept.get(slot)
        if not isinstance(previous, Unscanned):
            return previous
        scanned = kept(previous.raw, {key: previous.messages}, key, self.watch)
        if scanned is None:
            self._kept.pop(slot)
        else:
            self._kept.put(slot, scanned)
        return scanned

    def keep(self, raw: bytes, slot: Hashable, key: str, body: Any, pending: Reused | None) -> None:
        """Keep a body that passed the gate for the slot's next request, and tell the memos
        that read its history what is known of it (``object_prefix``): its frozen copy and
        how many messages it took from the previous body. Only a body that passed: a
        refused one is held by nothing here."""
        history = body.get(key) if type(body) is dict else None
        if type(history) is not list or len(history) < self.least:
            return
        if pending is None:
            messages = tuple(history)
            remember(history, messages)
            self._kept.put(slot, Unscanned(raw, messages))
            return
        remember(history, pending.kept.messages)
        note(pending.previous.messages, history, pending.reused)  # what a count would find
        self._kept.put(slot, pending.kept)
