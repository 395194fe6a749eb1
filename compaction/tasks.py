"""Celery tasks for compaction: thin — load ids, call a service (DESIGN.md).

``run_compaction`` is idempotent: a finished run, or one another executor
holds, is left alone, so a duplicate or redelivered message is harmless.
``acks_late`` + ``reject_on_worker_lost``: a worker killed mid-run does not
ack, the message comes back and the run is taken over (the session was not
touched: results are applied in one transaction at the end).
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_process_init

from . import services

logger = logging.getLogger("contextsvc.compaction")

MAX_RETRIES = 5


@worker_process_init.connect
def _warm_up(**_: object) -> None:
    """Load the tokenizer (and the SDK) once per worker process, not in the first run."""
    from contextsvc.engine.tokens import get_tokenizer

    from .conf import setting_str

    get_tokenizer()
    if setting_str("ANTHROPIC_API_KEY"):
        import anthropic  # noqa: F401 - a second-long import, paid at start, not in a run


def backoff(retries: int) -> int:
    """Seconds before retry n (0-based): 5, 10, 20, 40, 80 — capped at 5 minutes."""
    return min(300, 5 * 2**retries)


@shared_task(
    bind=True,
    name="compaction.run",
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=MAX_RETRIES,
    ignore_result=True,
)
def run_compaction(self, run_id: str) -> str | None:
    try:
        run = services.compaction_execute(
            run_id=run_id,
            task_id=self.request.id,
            can_retry=self.request.retries < self.max_retries,
        )
    except services.RetryableCompactionError as exc:
        # Transient (429 / 5xx / overloaded, a database hiccup): the run is
        # queued again; the session is untouched.
        raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
    if run is None:
        logger.info("compaction run %s does not exist (any more); nothing to do", run_id)
        return None
    return run.status


@shared_task(name="compaction.requeue_stale", ignore_result=True)
def requeue_stale() -> int:
    """Periodic (beat): re-send runs whose queue message or worker was lost.

    The append hook does the same for the session it sees, so without beat a
    lost run is re-sent on that session's next append.
    """
    return services.compaction_requeue_stale()
