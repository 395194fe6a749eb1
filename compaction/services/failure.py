"""Ending an attempt without applying it: fail the run, or release it to be retried.

Neither touches the session row (docs/concepts/compaction.md#summarizer-failure), and only the
attempt that holds the run may end it: a holder that outlived its lease must not fail or
release a run that was requeued and claimed again.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.db import DatabaseError, transaction
from django.db.models import F
from django.utils import timezone

from .. import leases, selectors
from ..models import CompactionRun, CompactionState

logger = logging.getLogger("contextsvc.compaction")

Status = CompactionRun.Status
Trigger = CompactionRun.Trigger


def compaction_release(run: CompactionRun, attempt: int, code: str, message: str) -> None:
    """Back to queued (a transient failure the task retries); the session is untouched."""
    with transaction.atomic():
        CompactionRun.objects.filter(pk=run.pk, attempts=attempt, status=Status.RUNNING).update(
            status=Status.QUEUED,
            error_code=code,
            error=message[:2000],
            # Past the task's retry countdown (at most 5 minutes): the retry,
            # not a recovery sweep, picks it up again.
            lease_expires_at=timezone.now() + leases.STALE_QUEUED + timedelta(minutes=5),
        )


def compaction_mark_failed(
    run: CompactionRun, attempt: int, code: str, message: str, started: float
) -> CompactionRun:
    """Mark the run failed. The session row is not touched
    (docs/concepts/compaction.md#summarizer-failure); a failed auto run counts toward the circuit
    breaker."""
    try:
        with transaction.atomic():
            run = CompactionRun.objects.select_for_update().get(pk=run.pk)
            if run.attempts != attempt or run.status != Status.RUNNING:
                # Superseded, finished, or requeued after its lease lapsed: a
                # holder that outlived its lease must not fail the requeued run.
                return run
            run.status = Status.FAILED
            run.error_code = code
            run.error = message[:2000]
            run.finished_at = timezone.now()
            run.lease_expires_at = None
            run.timings = {
                **(run.timings or {}),
                "total_ms": round((time.perf_counter() - started) * 1000, 2),
            }
            run.save()
            if run.trigger == Trigger.AUTO:
                cstate, _ = CompactionState.objects.get_or_create(session_id=run.session_id)
                CompactionState.objects.filter(pk=cstate.pk).update(
                    consecutive_failures=F("consecutive_failures") + 1
                )
                cstate.refresh_from_db()
                if (
                    cstate.consecutive_failures >= selectors.BREAKER_THRESHOLD
                    and not cstate.breaker_opened_at
                ):
                    cstate.breaker_opened_at = timezone.now()
                    cstate.save(update_fields=["breaker_opened_at"])
                    logger.warning(
                        "compaction circuit breaker open for session %s after %s failed auto runs",
                        run.session_id,
                        cstate.consecutive_failures,
                    )
    except DatabaseError:
        logger.exception("could not mark compaction run %s failed", run.pk)
    logger.warning("compaction run %s failed: %s %s", run.pk, code, message)
    return run


def compaction_fail_lost(run: CompactionRun, started: float) -> CompactionRun:
    """Fail a run whose executor was lost too many times (``leases.exhausted``)."""
    return compaction_mark_failed(
        run,
        run.attempts,
        "SERVICE_UNAVAILABLE",
        f"The compaction's worker was lost {run.attempts} time(s); the session is unchanged",
        started,
    )
