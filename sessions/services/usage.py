"""Writes of reported LLM usage (docs/concepts/context-build.md#calibration), which calibrate the
session's estimate."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from contextsvc import telemetry
from contextsvc.errors import ValidationFailed
from sessions import accounting, hotpath, status
from sessions.extensions import REGISTRY
from sessions.live import live_q
from sessions.models import Message, Session, UsageReport

from .calls import context_call_complete
from .inputs import UsageData

# What a usage report changes on the session row (``refresh_guard``'s two included).
USAGE_FIELDS = (
    "reported_total",
    "reported_through_seq",
    "estimated_at_report",
    "guard_status",
    "used_tokens",
    "updated_at",
)


def session_record_usage(
    *, session: Session, usage: UsageData, savepoint: bool = True
) -> tuple[UsageReport, accounting.BudgetState]:
    """Store one call's usage and what the service estimated for the same messages.

    ``savepoint=False``: as ``session_append_messages``'s (the proxy's stored reply).
    """
    with transaction.atomic(savepoint=savepoint):
        return _record_usage(session, usage)


def _record_usage(session: Session, usage: UsageData) -> tuple[UsageReport, accounting.BudgetState]:
    # Without the tools (a megabyte of JSON at most): nothing here reads them,
    # and the UPDATE below writes only the columns the report changes.
    session = hotpath.lock_session(session.pk, exclude=hotpath.HEAVY_FIELDS)
    through = usage.get("through_seq")
    if through is None:
        through = session.last_seq
    if through > session.last_seq:
        raise ValidationFailed(
            f"through_seq {through} is beyond the last message (seq {session.last_seq})",
            details={"field": "through_seq"},
        )
    # docs/concepts/context-build.md#usage-total: total = input + cache_creation + cache_read +
    # output
    total = (
        usage.get("input_tokens", 0)
        + usage.get("cache_creation_tokens", 0)
        + usage.get("cache_read_tokens", 0)
        + usage.get("output_tokens", 0)
    )
    estimate_now = accounting.compute_budget(session).estimated
    later = 0
    if through < session.last_seq:
        later = (
            Message.objects.filter(
                live_q(session),
                session=session,
                seq__gt=through,
                retracted_at__isnull=True,
            ).aggregate(t=Sum("token_count"))["t"]
            or 0
        )
    estimated_then = max(0, estimate_now - later)
    report = UsageReport.objects.create(
        session=session,
        through_seq=through,
        input_tokens=usage.get("input_tokens", 0),
        output_tokens=usage.get("output_tokens", 0),
        cache_creation_tokens=usage.get("cache_creation_tokens", 0),
        cache_read_tokens=usage.get("cache_read_tokens", 0),
        total_tokens=total,
        estimated_tokens=estimated_then,
    )
    context_call_complete(session=session, usage=usage, through_seq=through)
    session.reported_total = total
    session.reported_through_seq = through
    session.estimated_at_report = estimated_then
    state = status.refresh_guard(session)
    session.updated_at = timezone.now()
    hotpath.save_fields(session, USAGE_FIELDS)
    for hook in REGISTRY.after_append:
        transaction.on_commit(lambda hook=hook: hook(session, state, "usage"))
    if telemetry.enabled():
        # Counted once the report is kept (a rolled-back call was not recorded).
        transaction.on_commit(lambda: telemetry.record_token_usage(session, usage))
    return report, state
