"""The chains of a conversation's newest messages, kept for its next call.

A client that moves a cache marker (Claude Code marks its newest messages)
changes a message its previous request sent, so the digest of that request's
history (``json_prefix``) no longer matches, and every message would be
fingerprinted again: about 13 ms at 2,000 messages, on every call. The gate
reuses the parsed objects of every message two requests share
(``body_reuse``); those are the same objects here, with the same
fingerprints, so the chain after the last of them is the one the previous
call computed. It is kept for that call's newest ``TAIL`` messages (a moved
marker is near the end), by the history's first message object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contextsvc.engine.providers.fingerprint import ClientChains
from contextsvc.lru import BoundedLRU

from .object_prefix import shared_objects, snapshot

TAIL = 16
LEAST = 64  # shorter histories are fingerprinted whole (cheap)
# first message object id → (the messages, the first index kept, the chains from it on)
_KEPT: BoundedLRU[int, tuple[tuple[Any, ...], int, list[str]]] = BoundedLRU(256)


def known_chain(messages: Sequence[dict[str, Any]]) -> tuple[int, str] | None:
    """How many leading messages are the previous call's own objects, and their chain;
    None when that is not among the kept ones."""
    kept = _KEPT.get(id(messages[0])) if len(messages) >= LEAST else None
    if kept is None:
        return None
    old, first, chains = kept
    shared = shared_objects(old, messages)
    if shared < first:
        return None
    return shared, chains[shared - first]


def keep(messages: Sequence[dict[str, Any]], chains: ClientChains) -> None:
    """Keep the chains after the newest messages (those computed already: from ``base`` on)."""
    count = len(messages)
    if count < LEAST:
        return
    first = max(count - TAIL, chains.base, 1)
    tail = [chains.at(k) for k in range(first, count + 1)]
    _KEPT.put(id(messages[0]), (snapshot(messages), first, tail))  # holds messages[0]: its id stays
