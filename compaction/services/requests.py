"""Requesting compaction runs: create or join one, send it to the workers, recover lost ones.

Services never import ``compaction.tasks`` (the tasks call the services):
runs are sent to the workers by task name.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from contextsvc.celery import app as celery_app
from contextsvc.errors import ValidationFailed
from sessions import hotpath
from sessions.models import Session

from .. import leases, reasons, selectors
from ..models import CompactionRun
from .failure import compaction_fail_lost
from .policy import resolve_chain

logger = logging.getLogger("contextsvc.compaction")

Trigger = CompactionRun.Trigger
Status = CompactionRun.Status

# The name ``compaction.tasks.run_compaction`` is registered under.
RUN_TASK = "compaction.run"
# No new auto run right after one that could not shrink the window, until a few
# more messages have arrived.
AUTO_COOLDOWN_MESSAGES = 4
MAX_INSTRUCTIONS = 20_000


def compaction_auto_request(
    *, session: Session, reason: dict[str, Any], strategy: str | None = None
) -> CompactionRun | None:
    """An automatic run, unless the circuit breaker is open or one is under way
    (``strategy``: one strategy instead of the chain, e.g. the planner's clear;
    ``reason``: why, as ``compaction_request`` takes it)."""
    if selectors.breaker_open_for(session):
        return None
    active = (
        CompactionRun.objects.filter(session=session, status__in=CompactionRun.ACTIVE)
        .exclude(trigger=Trigger.EMERGENCY)
        .first()
    )
    if active is not None:
        compaction_recover(active)
        if active.is_active:
            return active
    last = (
        CompactionRun.objects.filter(session=session, trigger=Trigger.AUTO)
        .order_by("-created_at")
        .first()
    )
    if (
        last is not None
        and last.status == Status.SUCCEEDED
        and not last.changed
        and last.through_seq is not None
        and session.last_seq - last.through_seq < AUTO_COOLDOWN_MESSAGES
    ):
        return None
    run, _ = compaction_request(
        session=session,
        trigger=Trigger.AUTO,
        reason=reasons.with_policy_change(session, reason),
        strategy=strategy,
    )
    return run


def compaction_request(
    *,
    session: Session,
    trigger: str,
    reason: dict[str, Any],
    strategy: str | None = None,
    instructions: str = "",
    retain_last_turns: int | None = None,
    enqueue: bool = True,
    prediction: dict[str, Any] | None = None,
) -> tuple[CompactionRun, bool]:
    """Create a queued run, or join the one under way: ``(run, created)``.

    ``reason``: why the run is asked for, with its numbers (``compaction.reasons``,
    docs/concepts/compaction.md#reasons): required, so no run is recorded without
    one; a joined run keeps its own.

    ``prediction``: what a dry run of the same request computed (the dashboard's
    preview), stored with a new run for predicted-vs-actual; a joined run keeps its own.

    ``enqueue``: send it to a worker once this transaction commits (never
    before: the worker must find the row).
    """
    if trigger not in Trigger.values:
        raise ValueError(f"unknown trigger {trigger!r}")
    if not isinstance(reason, dict) or reason.get("kind") not in reasons.KINDS:
        raise ValueError(f"a compaction run needs a reason, got {reason!r}")
    chain = resolve_chain(session, strategy)
    if retain_last_turns is not None and (
        isinstance(retain_last_turns, bool)
        or not isinstance(retain_last_turns, int)
        or retain_last_turns < 0
    ):
        raise ValidationFailed(
            "retain_last_turns must be a non-negative integer",
            details={"field": "retain_last_turns"},
        )
    instructions = instructions or ""
    if len(instructions) > MAX_INSTRUCTIONS:
        raise ValidationFailed(
            f"instructions must be at most {MAX_INSTRUCTIONS} characters",
            details={"field": "instructions"},
        )
    if trigger != Trigger.EMERGENCY:
        # Never join a dead run: requeue (or fail) one whose lease lapsed first.
        # Done before the session lock: recovering locks the run row, and the
        # apply locks run then session, so the other order could deadlock.
        for stale in CompactionRun.objects.filter(
            session=session, status__in=CompactionRun.ACTIVE, lease_expires_at__lte=timezone.now()
        ).exclude(trigger=Trigger.EMERGENCY):
            compaction_recover(stale)
    with transaction.atomic():
        locked = hotpath.lock_session(session.pk)
        if locked.live_message_count == 0 and not locked.retain and not locked.summary:
            # docs/concepts/context-build.md#validation.
            raise ValidationFailed("Conversation has no messages", details={"field": "messages"})
        if trigger != Trigger.EMERGENCY:
            active = (
                CompactionRun.objects.filter(session=locked, status__in=CompactionRun.ACTIVE)
                .exclude(trigger=Trigger.EMERGENCY)
                .first()
            )
            if active is not None:
                return active, False
        task_id = str(uuid.uuid4()) if enqueue else ""
        try:
            with transaction.atomic():
                run = CompactionRun.objects.create(
                    session=locked,
                    trigger=trigger,
                    reason=reason,
                    strategy=strategy or "chain",
                    chain=list(chain),
                    forced=trigger != Trigger.AUTO,
                    instructions=instructions,
                    retain_last_turns=retain_last_turns,
                    prediction=prediction,
                    celery_task_id=task_id,
                    lease_expires_at=timezone.now() + leases.STALE_QUEUED,
                )
        except IntegrityError:
            # The partial unique index: another request won (only possible
            # without the row lock, e.g. a driver that ignores FOR UPDATE).
            active = CompactionRun.objects.filter(
                session=locked, status__in=CompactionRun.ACTIVE
            ).first()
            if active is None:
                raise
            return active, False
        if enqueue:
            run_id = run.pk
            transaction.on_commit(lambda: enqueue_run(run_id, task_id))
    return run, True


def enqueue_run(run_id: Any, task_id: str | None = None) -> None:
    """Send a run to the workers; on failure it stays queued and is re-sent later."""
    options: dict[str, Any] = {}
    queue = settings.CONTEXTSVC_COMPACTION_QUEUE
    if queue:
        # A dedicated worker pool (``celery worker -Q <queue>``) for compaction.
        options["queue"] = queue
    try:
        # By name (services never import the tasks), and without a result,
        # as the task declares: nothing subscribes to the result backend.
        celery_app.send_task(
            RUN_TASK,
            args=[str(run_id)],
            task_id=task_id or str(uuid.uuid4()),
            ignore_result=True,
            **options,
        )
    except Exception:  # noqa: BLE001 - a broker outage must not fail the request
        logger.exception("could not enqueue compaction run %s; it stays queued", run_id)


def compaction_recover(run: CompactionRun) -> bool:
    """Requeue, or fail, a run whose lease lapsed: its queue message was lost or
    its executor died. False (and nothing written) for a live or finished run.

    Called by whoever looks at a run — the append hook, ``POST /compact``,
    ``GET /context``, ``GET /compactions/{id}``, a worker's sweep, beat — so a
    dead run is recovered without beat. ``run`` is refreshed when it changed.
    """
    if not leases.lapsed(run):
        return False
    with transaction.atomic():
        locked = CompactionRun.objects.select_for_update().filter(pk=run.pk).first()
        now = timezone.now()
        if locked is None or not leases.lapsed(locked, now):
            return False  # renewed, claimed or finished meanwhile
        if leases.exhausted(locked):
            ran = (now - locked.started_at).total_seconds() if locked.started_at else 0.0
            compaction_fail_lost(locked, time.perf_counter() - ran)
        else:
            # A new task id: should the broker redeliver the old message later,
            # it finds the run held under another id and leaves it alone.
            task_id = str(uuid.uuid4())
            CompactionRun.objects.filter(pk=locked.pk).update(
                status=Status.QUEUED,
                celery_task_id=task_id,
                lease_expires_at=now + leases.STALE_QUEUED,
            )
            transaction.on_commit(lambda: enqueue_run(locked.pk, task_id))
            logger.warning(
                "compaction run %s: lease lapsed (status %s, attempt %s), requeued",
                locked.pk,
                locked.status,
                locked.attempts,
            )
    run.refresh_from_db()
    return True


def compaction_requeue_stale() -> int:
    """Requeue or fail every run whose lease lapsed (beat's ``tasks.requeue_stale``
    and every worker's own sweep)."""
    stale = CompactionRun.objects.filter(
        status__in=CompactionRun.ACTIVE, lease_expires_at__lte=timezone.now()
    )
    return sum(compaction_recover(run) for run in stale)
