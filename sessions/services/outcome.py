"""A model call's outcome on its record (``ContextCall``), and the session's failed-call count."""

from __future__ import annotations

from typing import Any

from django.db.models import F

from sessions.models import ContextCall, Session
from sessions.selectors_calls import OUTCOME_FIELDS


def call_outcome_record(*, call_id: int | None, session_pk: int, values: dict[str, Any]) -> None:
    """Write ``values`` (``OUTCOME_FIELDS``) on the record ``call_id`` (when there is one);
    a failed call adds one to ``Session.failed_calls`` in the same statement's way
    (an ``F`` expression: concurrent calls of a session never lose a count)."""
    if call_id is not None:
        fields = {k: v for k, v in values.items() if k in OUTCOME_FIELDS}
        ContextCall.objects.filter(pk=call_id).update(**fields)
        if values.get("failed"):
            # No usage came back: upstream bills nothing for an error it answered, so the
            # build's estimated cost is taken off (a cut stream keeps what it reported).
            ContextCall.objects.filter(
                pk=call_id, completed_at__isnull=True, cost_usd__isnull=False
            ).update(cost_usd=0.0, cost_without_cache_usd=0.0)
    if values.get("failed"):
        Session.objects.filter(pk=session_pk).update(failed_calls=F("failed_calls") + 1)
