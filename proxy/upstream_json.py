"""The upstream body's JSON, written only from where its history stops being the previous call's.

A session's managed history is, call after call, mostly the same objects:
the build shares the messages it converted before (the turns memo) and adds
the new ones. Writing the whole body each call costs time in proportion to
the history (at 2,000 messages, about 1 ms per call with the objects cold in
memory). So the JSON of each session's last body is kept with where each of
its history's items ends; a new body whose history begins with the same
objects (identity, as ``body_reuse`` shares them on the way in) copies their
bytes and writes only the rest:

- the fields before the history, written as a dict of their own, left open;
- the shared items' bytes, then each new item written on its own;
- the fields after the history, written as a dict of their own, closed.

orjson writes a dict field by field in its order, compactly, so the pieces
joined are byte for byte the whole body written at once. The objects a build
hands the relay are never changed afterwards (the memos that share them rely
on that too), so an object's bytes stay its JSON while it is kept. A body
orjson cannot write (a key that is not a string, an integer past 64 bits) is
written whole by ``upstream.encode_json`` and its session's bytes dropped.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import orjson

from contextsvc.lru import BoundedLRU

from .object_prefix import shared_objects
from .upstream import encode_json

# Per process: the last body of SENT_SLOTS sessions, at most SENT_MAX_BYTES of JSON in
# all (the objects are the build's own, shared with its memos); a history shorter
# than SENT_LEAST items is written whole.
SENT_SLOTS = 256
SENT_MAX_BYTES = 16 * 2**20
SENT_LEAST = 64


@dataclass(frozen=True, slots=True)
class Written:
    """A body as it was sent: its bytes, its history's objects and, per item, the offset
    just past its JSON, counted from the history's ``[``."""

    raw: bytes
    start: int  # the offset of the history's ``[`` in ``raw``
    items: tuple[Any, ...]
    ends: tuple[int, ...]


def write(body: dict[str, Any], key: str, previous: Written | None) -> Written:
    """``body`` written with the bytes of the leading history items it shares with
    ``previous`` copied (module doc). Raises what orjson raises for what it cannot write."""
    history = body[key]
    head: dict[str, Any] = {}
    tail: dict[str, Any] = {}
    side = head
    for name, value in body.items():
        if name == key:
            side = tail
        else:
            side[name] = value
    opening = orjson.dumps(head)[:-1] + (b"," if head else b"") + orjson.dumps(key) + b":["
    parts: list[bytes | memoryview] = [opening]
    shared = shared_objects(previous.items, history) if previous is not None else 0
    ends: list[int] = []
    offset = 1  # past the ``[``
    if previous is not None and shared:
        offset = previous.ends[shared - 1]
        parts.append(memoryview(previous.raw)[previous.start + 1 : previous.start + offset])
    for item in history[shared:]:
        if offset > 1:
            parts.append(b",")
            offset += 1
        item_raw = orjson.dumps(item)
        parts.append(item_raw)
        offset += len(item_raw)
        ends.append(offset)
    parts.append(b"]," + orjson.dumps(tail)[1:] if tail else b"]}")
    kept_ends = (*previous.ends[:shared], *ends) if previous is not None else tuple(ends)
    return Written(b"".join(parts), len(opening) - 1, tuple(history), kept_ends)


class HistoryJson:
    """The last body written per session, bounded by the bytes they hold."""

    def __init__(self, *, slots: int, max_bytes: int, least: int) -> None:
        self.least = least  # a shorter history is written whole, and nothing is kept
        self._kept: BoundedLRU[Hashable, Written] = BoundedLRU(
            slots, max_weight=max_bytes, weigh=lambda w: len(w.raw)
        )

    def encode(self, body: dict[str, Any], key: str, slot: Hashable) -> bytes:
        """``body``'s JSON, byte for byte ``encode_json(body)``."""
        history = body.get(key)
        if type(history) is not list or len(history) < self.least:
            return encode_json(body)
        try:
            written = write(body, key, self._kept.get(slot))
        except (orjson.JSONEncodeError, TypeError):
            self._kept.pop(slot)
            return encode_json(body)
        self._kept.put(slot, written)
        return written.raw

    def clear(self) -> None:
        self._kept.clear()


SENT = HistoryJson(slots=SENT_SLOTS, max_bytes=SENT_MAX_BYTES, least=SENT_LEAST)
