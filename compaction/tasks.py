"""Celery tasks for compaction: thin — load ids, call a service (DESIGN.md).

``run_compaction`` is idempotent: a finished run, or one another executor
holds, is left alone, so a duplicate or redelivered message is harmless.
``acks_late`` + ``reject_on_worker_lost``: a worker child killed mid-run does
not ack, the message comes back and the run is taken over (the session was not
touched: results are applied in one transaction at the end). A whole worker
killed takes its messages with it until the broker's visibility timeout, so
every worker also sweeps for runs whose heartbeat lease lapsed and requeues
them (``leases.Sweeper``): recovery in about a lease, with or without beat.

The services send runs here by name (``services.requests.RUN_TASK``) and never
import this module.
"""

from __future__ import annotations

import logging

from celery import Task, shared_task
from celery.signals import worker_init, worker_ready, worker_shutdown

from contextsvc.engine.tokens import get_tokenizer

from . import leases, summarizers
from .services.execute import RetryableCompactionError, compaction_execute
from .services.requests import RUN_TASK, compaction_requeue_stale

logger = logging.getLogger("contextsvc.compaction")

MAX_RETRIES = 5


@worker_init.connect
def _warm_up(**_: object) -> None:
    """Load the tokenizer (and the configured SDKs) once in the worker's main process.

    Before the pool starts, so prefork children inherit them: a child forked to
    replace a killed one is up at once, not after seconds of imports (Celery
    kills a child that is not up within 4 s and forks another, which would load
    them again). With the solo or threads pool it is the same process.
    """
    get_tokenizer()
    if summarizers.anthropic_configured():
        summarizers.load_sdk()
    if summarizers.openai_configured():
        summarizers.load_openai_sdk()


_sweeper: leases.Sweeper | None = None


@worker_ready.connect
def _start_sweeper(**_: object) -> None:
    """In the worker's main process: recover lapsed runs every third of a lease."""
    global _sweeper
    if _sweeper is None:
        _sweeper = leases.Sweeper(compaction_requeue_stale, leases.heartbeat_interval())
        _sweeper.start()


@worker_shutdown.connect
def _stop_sweeper(**_: object) -> None:
    global _sweeper
    if _sweeper is not None:
        _sweeper.stop()
        _sweeper = None


def backoff(retries: int) -> int:
    """Seconds before retry n (0-based): 5, 10, 20, 40, 80 — capped at 5 minutes."""
    return min(300, 5 * 2**retries)


@shared_task(
    bind=True,
    name=RUN_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=MAX_RETRIES,
    ignore_result=True,
)
def run_compaction(self: Task, run_id: str) -> str | None:
    """Execute run ``run_id``; a transient failure retries with backoff."""
    try:
        run = compaction_execute(
            run_id=run_id,
            task_id=self.request.id,
            can_retry=self.request.retries < self.max_retries,
        )
    except RetryableCompactionError as exc:
        # Transient (429 / 5xx / overloaded, a database hiccup): the run is
        # queued again; the session is untouched.
        raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
    if run is None:
        logger.info("compaction run %s does not exist (any more); nothing to do", run_id)
        return None
    return run.status


@shared_task(name="compaction.requeue_stale", ignore_result=True)
def requeue_stale() -> int:
    """Periodic (beat): requeue or fail runs whose queue message or worker was lost.

    Workers sweep the same way on their own, and every request that looks at a
    run recovers it, so beat is a backstop, not a requirement.
    """
    return compaction_requeue_stale()
