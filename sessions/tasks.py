"""Celery tasks of the sessions app: thin, idempotent, safe to run twice."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from .outputs.gc import outputs_gc
from .recall.index import recall_catch_up, recall_index_sweep
from .services.exact_counts import estimated_counts_sweep, session_count_exact
from .services.idempotency import idempotency_prune
from .services.search_index import search_index_catch_up, search_index_sweep


@shared_task(
    name="sessions.gc_outputs",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(Exception,),
    retry_backoff=30,
    max_retries=3,
)
def gc_outputs(older_than_days: int | None = None) -> dict[str, Any]:
    """docs/concepts/trimming.md#garbage-collection: delete tool outputs nothing references (see
    ``outputs_gc``).

    Idempotent: a second run finds nothing left to delete. Schedule it daily
    (celery beat), or run ``manage.py gc_outputs`` from cron.
    """
    result = outputs_gc(older_than_days=older_than_days)
    # The per-output list can be long; the task result keeps the totals.
    return {k: v for k, v in result.items() if k != "outputs"}


@shared_task(name="sessions.prune_idempotency_keys", acks_late=True, ignore_result=True)
def prune_idempotency_keys() -> int:
    """Periodic (beat, hourly): ``manage.py prune_idempotency_keys``. Idempotent."""
    return idempotency_prune()


@shared_task(
    name="sessions.count_exact_tokens",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(Exception,),
    retry_backoff=5,
    max_retries=3,
)
def count_exact_tokens(session_id: int, seqs: list[int]) -> dict[str, str]:
    """Exact token counts of messages an append stored with an estimate (``exact_counts``).

    Idempotent: a message already counted is left alone. A failure after the
    retries leaves the estimate in place.
    """
    return {
        str(seq): outcome
        for seq, outcome in session_count_exact(session_id=session_id, seqs=seqs).items()
    }


@shared_task(name="sessions.count_estimated_tokens", acks_late=True, ignore_result=True)
def count_estimated_tokens(older_than_seconds: int = 300) -> int:
    """Periodic (beat, every 10 minutes): ``manage.py count_estimated_tokens``.
    Exact counts of estimates whose own task never ran. Idempotent."""
    return estimated_counts_sweep(older_than_seconds=older_than_seconds)


@shared_task(name="sessions.recall_index", acks_late=True, ignore_result=True)
def recall_index(max_age_hours: int = 48) -> int:
    """Periodic (beat, every minute): ``manage.py index_recall``. Idempotent: the
    state row is locked while a session is indexed, and advanced in the same commit."""
    # The transcript search's words too (sessions.services.search_index).
    search_index_sweep(max_age_hours=max_age_hours)
    return recall_index_sweep(max_age_hours=max_age_hours)


@shared_task(name="sessions.recall_index_session", acks_late=True, ignore_result=True)
def recall_index_session(session_id: int) -> int:
    """Index what one session appended (enqueued after its appends, at most every
    CONTEXTSVC_RECALL_INDEX_DELAY seconds). Idempotent; a deleted session is a no-op."""
    search_index_catch_up(session_id=session_id)  # the transcript search's words too
    return recall_catch_up(session_id, max_bytes=2**62).segments
