"""The digest of a client's messages exactly as sent, and of their prefix, in one pass.

A client sends its whole history every call, serialised the same way each
time: when the first ``n`` messages of a request are, as JSON, those of its
previous request, their chain hash (``engine.providers.fingerprint``) is the
one computed then, and only the rest needs fingerprinting.

A conversation's next history begins with the same message objects (the
gate reuses their parsed objects, ``proxy.body_reuse``): the digest state
after its previous history's messages is kept, by its first message object,
and only the new messages are serialised and hashed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from contextsvc.lru import BoundedLRU

from .object_prefix import shared_objects, snapshot

# Histories shorter than this are digested whole (cheap); at most 256 conversations kept.
KEPT_LEAST = 64
_KEPT: BoundedLRU[int, tuple[Sequence[Any], Any]] = BoundedLRU(256)


def json_digests(messages: Sequence[dict[str, Any]], known: int) -> tuple[str, str] | None:
    """(digest of ``messages[:known]``, digest of all of them) as JSON text, or None.

    The digest of a list is the sha256 of its compact JSON (orjson, the
    client's key order kept), so equal digests mean messages equal exactly as
    sent: the client's previous request had the same first ``known`` messages,
    and their chain is the one computed then (``fingerprint.ClientChains``). One
    serialisation and one hash pass give both: the JSON of a list prefix is
    the JSON of the whole up to the comma before element ``known``. None when
    the messages have no JSON text (an integer past 64 bits): the caller
    fingerprints them all. When the previous call's history is, object for
    object, where this one begins and ``known`` is its length, only the new
    messages are serialised (module doc).
    """
    grown = kept_digests(messages, known)
    if grown is not None:
        return grown
    try:
        whole = orjson.dumps(list(messages))
        tail = orjson.dumps(list(messages[known:])) if 0 < known < len(messages) else b""
    except (orjson.JSONEncodeError, TypeError):
        return None
    view = memoryview(whole)
    digest = hashlib.sha256()
    if known <= 0:
        digest.update(view[:-1])
        head = hashlib.sha256(b"[]")
    elif known >= len(messages):
        digest.update(view[:-1])
        head = _closed(digest) if known == len(messages) else None
    else:
        cut = len(whole) - len(tail)  # the comma before element ``known``
        digest.update(view[:cut])
        head = _closed(digest)
        digest.update(view[cut:-1])
    _keep(messages, digest)
    return (_short(head) if head is not None else ""), _short(_closed(digest))


def kept_digests(messages: Sequence[dict[str, Any]], known: int) -> tuple[str, str] | None:
    """``json_digests`` from the kept state, when the previous call's history is, object for
    object, where this one begins and ``known`` is its length; None otherwise."""
    if len(messages) < KEPT_LEAST:
        return None
    kept = _KEPT.get(id(messages[0]))  # alive while its entry is: the entry holds it
    if kept is None or not known == len(kept[0]) <= len(messages):
        return None
    old, state = kept
    if shared_objects(old, messages) < len(old):
        return None
    return _grown(messages, known, state)


def _grown(messages: Sequence[dict[str, Any]], known: int, state: Any) -> tuple[str, str] | None:
    """The digests from the kept state of the first ``known`` messages: the rest serialised."""
    digest = state.copy()
    if known < len(messages):
        try:
            tail = orjson.dumps(list(messages[known:]))
        except (orjson.JSONEncodeError, TypeError):
            return None
        digest.update(b"," + memoryview(tail)[1:-1])
    _keep(messages, digest)
    return _short(_closed(state)), _short(_closed(digest))


def _keep(messages: Sequence[dict[str, Any]], digest: Any) -> None:
    """The state after ``messages`` (their JSON without its ``]``), for the next call."""
    if len(messages) >= KEPT_LEAST:
        _KEPT.put(id(messages[0]), (snapshot(messages), digest.copy()))


def _closed(digest: Any) -> Any:
    out = digest.copy()
    out.update(b"]")
    return out


def _short(digest: Any) -> str:
    return digest.hexdigest()[:40]
