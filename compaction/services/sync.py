"""Running a compaction in the request: ``wait: true``, the context preflight, overflow.

The sync claim uses its own task id, so the queue message of a joined run
finds it taken (and returns) instead of taking it over. Nobody waits on a dead
run: one whose lease lapsed is requeued and run here, one whose holder stopped
beating is answered as it is.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from django.conf import settings
from django.db import connection, connections

from contextsvc.engine.summarize import Summarizer
from contextsvc.errors import CompressionNotNeeded, Conflict, Unavailable, ValidationFailed
from sessions.models import Session

from .. import leases, reasons
from ..models import CompactionRun
from .execute import compaction_execute
from .requests import compaction_recover, compaction_request

logger = logging.getLogger("contextsvc.compaction")

Trigger = CompactionRun.Trigger
Status = CompactionRun.Status


def compaction_run_sync(
    *, run: CompactionRun, summarizer: Summarizer | None = None, timeout: float | None = None
) -> CompactionRun:
    """Run ``run`` in this process, or wait for the executor that has it.

    ``wait: true``, ``GET /context`` at block, the ``compact_context`` tool and
    the overflow path. Waits at most ``timeout`` (default
    ``CONTEXTSVC_COMPACT_WAIT_SECONDS``), and never on a dead run: one whose
    lease lapsed is requeued and run here (or failed after too many attempts);
    one whose holder stopped beating is answered as it is.
    """
    wait = settings.CONTEXTSVC_COMPACT_WAIT_SECONDS if timeout is None else timeout
    deadline = time.monotonic() + wait
    run_here = run.status == Status.QUEUED
    while True:
        if run_here:
            done = compaction_execute(
                run_id=run.pk, task_id=f"sync-{uuid.uuid4()}", summarizer=summarizer
            )
            if done is not None and done.is_finished:
                return done
            run_here = False
        run.refresh_from_db()
        if run.is_finished or time.monotonic() >= deadline:
            return run
        if compaction_recover(run):
            run_here = run.status == Status.QUEUED
            continue
        if leases.stalled(run):
            return run
        time.sleep(0.1)


def compaction_run_bounded(run: CompactionRun, timeout: float) -> CompactionRun:
    """``compaction_run_sync``, but the caller gets an answer within ``timeout``.

    A queued run is executed in a thread of its own (with its own connection
    and heartbeat) that goes on after the timeout; the caller answers with the
    run as it is. Inside a transaction the thread could not see the run's
    rows, so there it runs inline as before.
    """
    if run.status != Status.QUEUED or connection.in_atomic_block:
        return compaction_run_sync(run=run, timeout=timeout)
    deadline = time.monotonic() + timeout
    executor = threading.Thread(
        target=_execute_detached, args=(run.pk,), name=f"compaction-{run.pk}", daemon=True
    )
    executor.start()
    executor.join(timeout)
    run.refresh_from_db()
    if executor.is_alive() or run.is_finished:
        return run
    # The thread found the run taken (a worker claimed it first): wait on that holder.
    return compaction_run_sync(run=run, timeout=max(0.0, deadline - time.monotonic()))


def _execute_detached(run_id: Any) -> None:
    try:
        compaction_execute(run_id=run_id, task_id=f"sync-{uuid.uuid4()}")
    except Exception:  # noqa: BLE001 - nobody is left to raise to; the run is marked failed
        logger.exception("compaction run %s failed in the background", run_id)
    finally:
        connections.close_all()


def raise_for_failure(run: CompactionRun) -> None:
    """A failed run as the API error it stands for (503 for a summariser failure)."""
    if run.status != Status.FAILED:
        return
    details = {"run_id": str(run.pk)}
    if run.error_code == "VALIDATION_ERROR":
        raise ValidationFailed(run.error, details=details)
    if run.error_code == "CONFLICT":
        raise Conflict(run.error, details=details)
    if run.error_code == CompressionNotNeeded.code:
        raise CompressionNotNeeded(run.error, details=details)
    raise Unavailable(f"Compaction failed: {run.error}", details=details)


def compaction_overflow(
    *,
    session: Session,
    summarizer: Summarizer | None = None,
    detail: str = "",
    reported_tokens: int | None = None,
    source: str = "api",
    limit: int | None = None,
    previous_context_window: int | None = None,
) -> CompactionRun:
    """docs/concepts/compaction.md#overflow: the provider said the context is too long. Drop the
    oldest turns now, whatever else is running.

    The run's reason (docs/concepts/compaction.md#reasons) keeps what the provider said:
    ``source`` (api: the client's POST /overflow; proxy: upstream's answer), the request's
    size (``reported_tokens``) and the maximum it named (``limit``), and the session's
    context window before the proxy lowered it to that maximum."""
    logger.warning(
        "context overflow reported for session %s (provider counted %s tokens, the guard had %s): %s",
        session.pk,
        reported_tokens,
        session.used_tokens,
        detail[:500],
    )
    reason = reasons.overflow(
        session,
        source=source,
        reported_tokens=reported_tokens,
        limit=limit,
        previous_context_window=previous_context_window,
    )
    run, _ = compaction_request(
        session=session,
        trigger=Trigger.EMERGENCY,
        reason=reason,
        strategy="drop_oldest_turns",
        enqueue=False,
    )
    return compaction_run_sync(run=run, summarizer=summarizer)
