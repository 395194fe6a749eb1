"""Executing a queued run: claim it, compute the plan, apply it, or fail or release it.

``compaction_execute`` is what the worker's task and the synchronous paths
call; it is safe to call twice (a finished run, or one another executor
holds, is returned as it is).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import DatabaseError, transaction
from django.utils import timezone

from contextsvc import telemetry
from contextsvc.engine.errors import CompressionNotNeededError, EngineValidationError
from contextsvc.engine.summarize import Summarizer, SummarizerError
from contextsvc.errors import ServiceError
from sessions.models import Session
from sessions.recall.index import recall_catch_up

from .. import leases
from ..models import CompactionRun
from .apply import WindowChanged, apply_plan
from .failure import compaction_fail_lost, compaction_mark_failed, compaction_release
from .plan import compute_plan

logger = logging.getLogger("contextsvc.compaction")

Status = CompactionRun.Status

# Recomputations when the window moves between compute and apply.
MAX_APPLY_ATTEMPTS = 3
# A compaction indexes at most this much backlog (a synchronous one runs in a
# request); the periodic sweep and the search itself index the rest.
RECALL_CATCH_UP_BYTES = 16 * 1024 * 1024


class RetryableCompactionError(Exception):
    """A transient failure: the run is queued again and the task retries later."""


def _claim(run_id: Any, task_id: str | None) -> tuple[CompactionRun, int] | None:
    """Take the run for this executor under its row lock: ``(run, attempt)``,
    or None when it is finished or another live executor holds it."""
    with transaction.atomic():
        # No select_related here: FOR UPDATE would lock the session row too.
        run = CompactionRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.is_finished:
            return None
        now = timezone.now()
        if run.status == Status.RUNNING:
            # The same message again (the worker died: acks_late +
            # reject_on_worker_lost), or a lease run out: the executor is gone.
            redelivered = bool(task_id) and run.celery_task_id == task_id
            expired = run.lease_expires_at is not None and run.lease_expires_at <= now
            if not (redelivered or expired):
                return None
            if leases.exhausted(run):
                # Lost that many times (a run that kills its worker): stop here.
                compaction_fail_lost(run, time.perf_counter())
                return None
        run.status = Status.RUNNING
        run.attempts += 1
        run.started_at = run.started_at or now
        # Short: the heartbeat renews it while the run works.
        run.lease_expires_at = leases.lease_deadline(now)
        if task_id:
            run.celery_task_id = task_id
        run.save(
            update_fields=["status", "attempts", "started_at", "lease_expires_at", "celery_task_id"]
        )
        return run, run.attempts


def compaction_execute(
    *,
    run_id: Any,
    task_id: str | None = None,
    can_retry: bool = False,
    summarizer: Summarizer | None = None,
) -> CompactionRun | None:
    """Run a queued run to its end. Safe to call twice: a finished run, or one
    another executor holds, is returned as it is."""
    claim = _claim(run_id, task_id)
    if claim is None:
        return CompactionRun.objects.filter(pk=run_id).first()
    run, attempt = claim
    with leases.Heartbeat(run.pk, attempt):
        if not telemetry.enabled():
            return _execute_claimed(run, attempt, can_retry=can_retry, summarizer=summarizer)
        with telemetry.span("contextsvc.compaction", _run_attributes(run, attempt)) as span:
            done = _execute_claimed(run, attempt, can_retry=can_retry, summarizer=summarizer)
            _trace_result(span, done)
            return done


def _run_attributes(run: CompactionRun, attempt: int) -> dict[str, Any]:
    session = Session.objects.filter(pk=run.session_id).only("external_id", "model", "provider")
    found = session.first()
    out: dict[str, Any] = {
        "contextsvc.compaction.run_id": str(run.pk),
        "contextsvc.compaction.trigger": run.trigger,
        "contextsvc.compaction.attempt": attempt,
    }
    if found is not None:
        out.update(telemetry.session_attributes(found, "contextsvc.compaction"))
    return out


def _trace_result(span: Any, run: CompactionRun | None) -> None:
    """The run's outcome on its span, and the compaction event when the window shrank."""
    if run is None:
        span.set_attribute("contextsvc.compaction.status", "session_deleted")
        return
    span.set_attribute("contextsvc.compaction.status", run.status)
    if run.status == Status.FAILED:
        telemetry.set_error(span, run.error_code or "failed")
    if run.status == Status.SUCCEEDED:
        event = {
            "contextsvc.compaction.changed": bool(run.changed),
            "contextsvc.compaction.before_tokens": run.before_tokens or 0,
            "contextsvc.compaction.after_tokens": run.after_tokens or 0,
            "contextsvc.compaction.before_messages": run.before_msg_count or 0,
            "contextsvc.compaction.after_messages": run.after_msg_count or 0,
            "contextsvc.compaction.strategies": list(run.strategies_run or []),
        }
        if run.summarizer:
            event[telemetry.REQUEST_MODEL] = run.model or ""
        span.add_event(telemetry.COMPACTION_EVENT, event)


def _execute_claimed(
    run: CompactionRun, attempt: int, *, can_retry: bool, summarizer: Summarizer | None
) -> CompactionRun | None:
    started = time.perf_counter()
    cpu_started = time.thread_time()
    # What the compaction moves out of the window must be searchable once it is
    # gone (and the retention check searches for it): index the backlog first.
    recall_catch_up(run.session_id, max_bytes=RECALL_CATCH_UP_BYTES)
    try:
        for _ in range(MAX_APPLY_ATTEMPTS):
            plan = compute_plan(run, summarizer)
            try:
                return apply_plan(run, attempt, plan, started, cpu_started)
            except WindowChanged:
                logger.info("compaction run %s: the window moved, recomputing", run.pk)
        return compaction_mark_failed(
            run, attempt, "CONFLICT", "The live window kept changing during the compaction", started
        )
    except SummarizerError as exc:
        if exc.transient and can_retry:
            compaction_release(run, attempt, "SERVICE_UNAVAILABLE", str(exc))
            raise RetryableCompactionError(str(exc)) from exc
        return compaction_mark_failed(run, attempt, "SERVICE_UNAVAILABLE", str(exc), started)
    except CompressionNotNeededError as exc:
        return compaction_mark_failed(run, attempt, exc.code, exc.message, started)
    except EngineValidationError as exc:
        return compaction_mark_failed(run, attempt, "VALIDATION_ERROR", exc.message, started)
    except ServiceError as exc:
        return compaction_mark_failed(run, attempt, exc.code, exc.message, started)
    except DatabaseError as exc:
        if can_retry:
            compaction_release(run, attempt, "SERVICE_UNAVAILABLE", f"database: {exc}")
            raise RetryableCompactionError(str(exc)) from exc
        compaction_mark_failed(run, attempt, "SERVICE_UNAVAILABLE", f"database: {exc}", started)
        raise
    except (CompactionRun.DoesNotExist, Session.DoesNotExist):
        # The session was deleted under the run (its rows with it): nothing to
        # write, and nothing may be written — a save would bring it back.
        logger.info("compaction run %s: its session was deleted, stopping", run.pk)
        return None
    except Exception as exc:
        compaction_mark_failed(
            run, attempt, "INTERNAL_ERROR", f"{type(exc).__name__}: {exc}", started
        )
        raise
