"""Idempotency-Key records of appends: the request fingerprint, replay, saving and pruning."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import orjson
from django.conf import settings
from django.utils import timezone

from contextsvc.errors import Conflict
from sessions.models import IdempotencyRecord, Session

from .inputs import MessageData


def request_fingerprint(messages: Sequence[MessageData]) -> str:
    """An Idempotency-Key's fingerprint: over the parsed messages, canonicalised.

    Sorted keys and no whitespace, after parsing (defaults filled in, JSON-text
    tool arguments decoded): a client that re-serialises its retry with
    another key order or spacing means the same request and must not get a 409.
    """
    return hashlib.sha256(orjson.dumps(list(messages), option=orjson.OPT_SORT_KEYS)).hexdigest()


def replayed_response(session: Session, key: str, fingerprint: str) -> dict[str, Any] | None:
    """The stored answer to ``key``, None when it is new; 409 when it came with another body."""
    record = IdempotencyRecord.objects.filter(session=session, key=key).first()
    if record is None:
        return None
    if record.request_hash != fingerprint:
        raise Conflict(
            "Idempotency-Key was already used with a different request body",
            details={"field": "Idempotency-Key"},
        )
    return record.response


def idempotency_record_create(
    *, session: Session, key: str, fingerprint: str, response: dict[str, Any]
) -> None:
    """Keep an append's answer for its retries (inside the append's transaction)."""
    IdempotencyRecord.objects.create(
        session=session, key=key, request_hash=fingerprint, status_code=200, response=response
    )


def idempotency_prune(*, older_than_hours: int | None = None) -> int:
    """Delete Idempotency-Key records past their retention; returns how many.

    A retry after that window stores the batch again, so the TTL must exceed
    any client's retry horizon (default 24 h, CONTEXTSVC_IDEMPOTENCY_TTL_HOURS).
    """
    hours = (
        settings.CONTEXTSVC_IDEMPOTENCY_TTL_HOURS if older_than_hours is None else older_than_hours
    )
    cutoff = timezone.now() - timedelta(hours=hours)
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
