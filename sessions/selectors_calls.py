"""Reads of context-build records (``ContextCall``) for the API and the pages."""

from __future__ import annotations

from typing import Any

from contextsvc.errors import NotFound
from sessions.models import ContextCall, Session

# A model call's outcome (the proxy writes them: ``services.outcome``).
OUTCOME_FIELDS = (
    "upstream_status",
    "client_status",
    "error_type",
    "error_message",
    "retries",
    "stream_cut",
    "stream_events",
    "ttfb_ms",
    "total_ms",
    "failed",
)


def context_call_page(
    *, session: Session, cursor: int | None = None, limit: int = 50
) -> tuple[list[ContextCall], int | None]:
    """Newest first; ``cursor`` is the id to continue below (the previous page's ``next_cursor``)."""
    qs = ContextCall.objects.filter(session=session).order_by("-id")
    if cursor:
        qs = qs.filter(id__lt=cursor)
    page = list(qs[: limit + 1])
    next_cursor = page[limit - 1].id if len(page) > limit else None
    return page[:limit], next_cursor


def context_call_get(*, session: Session, call_id: str) -> ContextCall:
    """The session's record ``call_id`` (its id as the path gives it), or NotFound."""
    # isdigit alone accepts "³", which int() refuses; 18 digits fit a bigint.
    if call_id.isascii() and call_id.isdigit() and len(call_id) <= 18:
        call = ContextCall.objects.filter(session=session, pk=int(call_id)).first()
        if call is not None:
            return call
    raise NotFound(f"Call {call_id!r} not found")


def context_call_to_dict(call: ContextCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "source": call.source,
        "format": call.format,
        "model": call.model,
        "created_at": call.created_at,
        "first_seq": call.first_seq,
        "through_seq": call.through_seq,
        "message_count": call.message_count,
        "guard_status": call.guard_status,
        "effective_window": call.effective_window,
        "compact_at": call.compact_at,
        "estimated_input": call.estimated_input,
        "components": call.components,
        "breakdown": call.breakdown,
        "breakpoints": call.breakpoints,
        "cache_read_estimated": call.cache_read_estimated,
        "cache_write_estimated": call.cache_write_estimated,
        "build_ms": call.build_ms,
        "completed_at": call.completed_at,
        "reported_input": call.reported_input,
        "reported_total_input": call.reported_total_input,
        "reported_output": call.reported_output,
        "cache_read": call.cache_read,
        "cache_write": call.cache_write,
        "cost_usd": call.cost_usd,
        "cost_basis": "reported" if call.completed_at else "estimated",
        "cost_without_cache_usd": call.cost_without_cache_usd,
        "saved_usd": call.saved_usd,
        "latency_ms": call.latency_ms,
        **{name: getattr(call, name) for name in OUTCOME_FIELDS},
    }
