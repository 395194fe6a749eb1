"""Exact token counts, off the request path, for messages an append only estimated.

An append tokenizes at most ``CONTEXTSVC_EXACT_TOKEN_CHARS`` characters
exactly; a longer text is stored with a bounded estimate
(``contextsvc.engine.token_estimate``) and ``token_count_estimated`` set, and
``exact_counts_enqueue`` sends its seq to the workers on commit. There
``message_count_exact`` counts it (seconds of a core for 30 MB, outside any
lock), then, under the session row lock, puts the exact count on the message and
moves the session's cached counters by the difference — the same counters the
append moved by the estimate, so no other message is read or tokenized again,
whatever the session's length. The web processes' cached live windows see the
counters move and re-read the window once (``selectors.context_window``).

Safe to run twice (a message no longer estimated is left alone) and whatever
happened meanwhile: a message retracted or compacted out of the live window is
corrected on its row only (the counters no longer hold it); one whose view
changed under it (a trim, a compaction) is counted again from the row as it is
now. A failure leaves the estimate in place, and the session as it was.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Literal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from contextsvc.celery import app as celery_app
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.tokens import estimate_message
from sessions import accounting, hotpath, status
from sessions.extensions import REGISTRY
from sessions.live import in_live_window
from sessions.models import Message, Session
from sessions.outputs.budget import TRIMMABLE_STATES
from sessions.selectors import estimated_messages, message_stored_count

logger = logging.getLogger("contextsvc.tokens")

# By name: services never import the tasks (the tasks call the services).
COUNT_TASK = "sessions.count_exact_tokens"
# The session columns a corrected count moves.
COUNT_FIELDS = (
    "conversation_tokens",
    "tool_output_tokens",
    "estimated_at_report",
    "guard_status",
    "used_tokens",
    "updated_at",
)
# A view that changed while we counted is counted again, this many times at most
# (each change is a compaction or a trim: rare, and never endless).
_ATTEMPTS = 3

Outcome = Literal["counted", "exact", "gone", "changed"]


def exact_counts_enqueue(*, session_id: int, seqs: Sequence[int]) -> None:
    """Send the exact counts of ``seqs`` to the workers (on commit of the append)."""
    options = (
        {"queue": settings.CONTEXTSVC_TOKEN_COUNT_QUEUE}
        if settings.CONTEXTSVC_TOKEN_COUNT_QUEUE
        else {}
    )
    try:
        celery_app.send_task(
            COUNT_TASK,
            args=[session_id, list(seqs)],
            task_id=str(uuid.uuid4()),
            ignore_result=True,
            **options,
        )
    except Exception:  # noqa: BLE001 - a broker outage must not fail the append
        # The estimate stays (an over-estimate, by design); the periodic sweep
        # (``estimated_counts_sweep``) counts it later.
        logger.exception("could not enqueue exact token counts of session %s", session_id)


def estimated_counts_sweep(*, older_than_seconds: int = 300, limit: int = 1000) -> int:
    """Count exactly the estimates whose count never ran (the broker was down at
    the append, or the task failed its retries): periodic (beat) and
    ``manage.py count_estimated_tokens``. Younger ones are left to their task.
    Returns how many messages got their exact count."""
    created_before = timezone.now() - timedelta(seconds=older_than_seconds)
    counted = 0
    for session_id, seq in estimated_messages(created_before=created_before, limit=limit):
        try:
            outcome = message_count_exact(session_id=session_id, seq=seq)
        except Exception:  # noqa: BLE001 - one bad row must not stop the sweep
            logger.exception("exact count of session %s message %s failed", session_id, seq)
            continue
        counted += outcome == "counted"
    return counted


def session_count_exact(*, session_id: int, seqs: Sequence[int]) -> dict[int, Outcome]:
    """``message_count_exact`` for each of ``seqs``; what happened to each."""
    return {seq: message_count_exact(session_id=session_id, seq=seq) for seq in seqs}


def message_count_exact(*, session_id: int, seq: int) -> Outcome:
    """Replace message ``seq``'s estimated token count with the exact one (module doc)."""
    for _ in range(_ATTEMPTS):
        stored = message_stored_count(session_id, seq)
        if stored is None:
            return "gone"
        if not stored.estimated:
            return "exact"
        session = Session.objects.only("tokenizer", "policy").filter(pk=session_id).first()
        if session is None:
            return "gone"
        # The slow part, outside the lock: no budget, so exact.
        exact = estimate_message(
            stored.message,
            accounting.tokenizer_of(session),
            accounting.estimate_config_of(session),
        )
        outcome = _apply(session_id, stored.pk, stored.message, exact)
        if outcome != "changed":
            return outcome
    return "changed"


def _apply(session_id: int, pk: int, counted: EngineMessage, exact: int) -> Outcome:
    """Under the session lock: the exact count on the row, the difference on the counters."""
    with transaction.atomic():
        try:
            session = hotpath.lock_session(session_id, exclude=hotpath.HEAVY_FIELDS)
        except Session.DoesNotExist:
            return "gone"
        row = (
            Message.objects.filter(pk=pk)
            .values(
                "seq",
                "role",
                "token_count",
                "token_count_estimated",
                "view",
                "view_state",
                "output_ref",
                "retracted_at",
            )
            .first()
        )
        if row is None:
            return "gone"
        if not row["token_count_estimated"]:
            return "exact"
        if (row["view"], row["view_state"]) != (counted.view, counted.view_state):
            return "changed"  # counted a view that is gone: count the row as it is now
        delta = exact - row["token_count"]
        Message.objects.filter(pk=pk).update(token_count=exact, token_count_estimated=False)
        live = row["retracted_at"] is None and in_live_window(
            row["seq"], session.window_start_seq, session.head_end_seq
        )
        if not live or delta == 0:
            return "counted"
        _move_counters(session, row, delta)
        state = status.refresh_guard(session)
        session.updated_at = timezone.now()
        hotpath.save_fields(session, COUNT_FIELDS)
        if delta > 0:
            # More tokens than the estimate said (a text the samples under-read):
            # compaction's check points look again, as after reported usage.
            for hook in REGISTRY.after_append:
                transaction.on_commit(lambda hook=hook: hook(session, state, "usage"))
    return "counted"


def _move_counters(session: Session, row: dict, delta: int) -> None:
    """The cached counters that hold this live message's count, moved by ``delta``."""
    session.conversation_tokens = max(0, session.conversation_tokens + delta)
    # the untrimmed tool-output tokens (docs/concepts/trimming.md#tool-output-budget), while counted
    # for this window.
    if (
        row["role"] == "tool"
        and row["output_ref"]
        and row["view_state"] in TRIMMABLE_STATES
        and row["seq"] >= session.window_start_seq
        and session.tool_count_window_seq == session.window_start_seq
    ):
        session.tool_output_tokens = max(0, session.tool_output_tokens + delta)
    # Reported usage calibrates against our estimate of the prefix it covered:
    # a prefix holding this message was estimated with the old count.
    if (
        session.estimated_at_report is not None
        and session.reported_through_seq is not None
        and session.reported_through_seq >= row["seq"]
    ):
        session.estimated_at_report = max(0, session.estimated_at_report + delta)
