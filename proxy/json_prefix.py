"""The digest of a client's messages exactly as sent, and of their prefix, in one pass.

A client sends its whole history every call, serialised the same way each
time: when the first ``n`` messages of a request are, as JSON, those of its
previous request, their chain hash (``engine.providers.fingerprint``) is the
one computed then, and only the rest needs fingerprinting.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson


def json_digests(messages: Sequence[dict[str, Any]], known: int) -> tuple[str, str] | None:
    """(digest of ``messages[:known]``, digest of all of them) as JSON text, or None.

    The digest of a list is the sha256 of its compact JSON (orjson, the
    client's key order kept), so equal digests mean messages equal exactly as
    sent: the client's previous request had the same first ``known`` messages,
    and their chain is the one computed then (``fingerprint.ClientChains``). One
    serialisation and one hash pass give both: the JSON of a list prefix is
    the JSON of the whole up to the comma before element ``known``. None when
    the messages have no JSON text (an integer past 64 bits): the caller
    fingerprints them all.
    """
    try:
        whole = orjson.dumps(list(messages))
        tail = orjson.dumps(list(messages[known:])) if 0 < known < len(messages) else b""
    except (orjson.JSONEncodeError, TypeError):
        return None
    digest = hashlib.sha256()
    if known <= 0:
        digest.update(whole)
        return _short(hashlib.sha256(b"[]")), _short(digest)
    if known >= len(messages):
        digest.update(whole)
        return (_short(digest) if known == len(messages) else ""), _short(digest)
    cut = len(whole) - len(tail)  # the comma before element ``known``
    view = memoryview(whole)
    digest.update(view[:cut])
    head = digest.copy()
    head.update(b"]")
    digest.update(view[cut:])
    return _short(head), _short(digest)


def _short(digest: Any) -> str:
    return digest.hexdigest()[:40]
