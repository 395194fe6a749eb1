"""Applying a computed compaction: one short transaction under the session row lock.

Only the attempt that holds the run applies it, and only while the window it
was computed from is still the live one (``WindowChanged`` otherwise: the
caller recomputes). The transcript is never touched; the new window is
recorded as a snapshot, and every view it changes as a ViewChange.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from contextsvc.engine.pairing import pair_tool_calls
from sessions import accounting, hotpath
from sessions.recall.index import recall_add_summary

from ..models import CompactionRun, CompactionState, Snapshot, ViewChange
from .plan import CompactionPlan
from .window import (
    WINDOW_FIELDS,
    recount_tool_outputs,
    set_message_views,
    set_window,
    snapshot_message,
    view_key,
)

logger = logging.getLogger("contextsvc.compaction")

Status = CompactionRun.Status


class WindowChanged(Exception):
    """The live window moved (another compaction, a restore) since the run loaded it."""


def _unanswered_leaving(plan: CompactionPlan, head_end: int, start: int) -> set[str]:
    """Ids of the calls that leave the window unanswered (seqs between ``head_end`` and ``start``).

    A late result for one would have no call before it in any context, so it
    is refused: the id stops being open. A call answered before it left does
    not count: its id may be open again through a later call (reused ids), and
    that call stays open.
    """
    window = [*plan.window.head, *plan.window.messages]
    waiting = pair_tool_calls(window).waiting
    return {
        call_id
        for call_id, keys in waiting.items()
        if any(head_end < (window[i].seq or 0) < start for i, _ in keys)
    }


def apply_plan(
    run: CompactionRun,
    attempt: int,
    plan: CompactionPlan,
    started: float,
    cpu_started: float | None = None,
) -> CompactionRun:
    """Write ``plan`` to the session and finish ``run`` as succeeded (its timings included)."""
    t0 = time.perf_counter()
    result = plan.result
    with transaction.atomic():
        run = CompactionRun.objects.select_for_update().get(pk=run.pk)
        if run.attempts != attempt or run.status != Status.RUNNING:
            logger.info("compaction run %s: attempt %s superseded, not applying", run.pk, attempt)
            return run
        session = hotpath.lock_session(run.session_id)
        now_base = (
            session.window_start_seq,
            session.retain,
            session.summary,
            session.retract_count,
            session.head_end_seq,
        )
        if now_base != plan.base:
            raise WindowChanged
        before_used = accounting.compute_budget(session).budget.used
        shrinks = result.changed and result.result.after_tokens < result.result.before_tokens
        snapshot = None
        after_used = before_used
        if shrinks:
            new = result.window
            original = {m.seq: m for m in (*plan.window.head, *plan.window.messages)}
            kept = new.messages
            start = kept[0].seq if kept else plan.through_seq + 1
            # docs/concepts/compaction.md#sandwich-head: the head stays live, apart from the window,
            # as messages.
            head_end = (new.head[-1].seq or 0) if new.head else 0
            live = [*new.head, *kept]
            desired = {
                m.seq: (m.view, m.view_state, m.token_count)
                for m in live
                if m.seq in original and view_key(m) != view_key(original[m.seq])
            }
            changes = set_message_views(session, desired)
            gone = _unanswered_leaving(plan, head_end, start)
            if gone and session.open_tool_calls:
                session.open_tool_calls = {
                    k: v for k, v in session.open_tool_calls.items() if k not in gone
                }
            if new.summary and new.summary != session.summary:
                # The summary replaces messages in the context: it is searchable too.
                recall_add_summary(session=session, text=new.summary, through_seq=start - 1)
            state = set_window(
                session,
                retain=new.retain,
                summary=new.summary,
                start_seq=start,
                counter=plan.counter,
                head_end_seq=head_end,
            )
            extra = recount_tool_outputs(session)
            session.save(update_fields=[*WINDOW_FIELDS, *extra])
            after_used = state.budget.used
            # docs/concepts/compaction.md#snapshots: the transcript is untouched, the snapshot
            # holds the compacted window for resume.
            snapshot = Snapshot.objects.create(
                session=session,
                run=run,
                kind=Snapshot.Kind.COMPACTION,
                retain=new.retain,
                summary=new.summary,
                window_start_seq=start,
                head_end_seq=session.head_end_seq,
                through_seq=plan.through_seq,
                token_count=result.result.after_tokens,
                message_count=result.result.after_msg_count,
                messages=[snapshot_message(m) for m in live],
            )
            for change in changes:
                change.snapshot = snapshot
            ViewChange.objects.bulk_create(changes, batch_size=500)
        cstate, _ = CompactionState.objects.get_or_create(session=session)
        if shrinks and result.state_changed:
            sandwich = result.sandwich_state
            cstate.strategy = sandwich.strategy if sandwich else ""
            cstate.summary = sandwich.summary if sandwich else ""
            cstate.range_start = sandwich.summary_range[0] if sandwich else None
            cstate.range_end = sandwich.summary_range[1] if sandwich else None
            cstate.compressed_at = timezone.now() if sandwich else None
        cstate.consecutive_failures = 0
        cstate.breaker_opened_at = None
        cstate.save()

        r = result.result
        now = timezone.now()
        run.status = Status.SUCCEEDED
        run.changed = shrinks
        run.strategies_run = r.strategies_run if shrinks else []
        run.reports = [rep.to_dict() for rep in result.reports]
        run.before_tokens = r.before_tokens
        run.after_tokens = r.after_tokens if shrinks else r.before_tokens
        run.before_msg_count = r.before_msg_count
        run.after_msg_count = r.after_msg_count if shrinks else r.before_msg_count
        run.before_used = before_used
        run.after_used = after_used
        run.target_tokens = plan.target
        run.through_seq = plan.through_seq
        run.base_window_start_seq = plan.base[0]
        run.model = plan.model
        run.summarizer = plan.summarizer.name if plan.summarizer.calls else ""
        run.retention = plan.retention if shrinks else None
        run.retention_score = plan.retention_score if shrinks else None
        run.cost = plan.cost if shrinks else None
        run.error_code = ""
        run.error = ""
        run.finished_at = now
        run.lease_expires_at = None
        total = (time.perf_counter() - started) * 1000
        run.timings = {
            "queue_ms": _ms(run.started_at - run.created_at) if run.started_at else None,
            "load_ms": round(plan.load_ms, 2),
            "compute_ms": round(plan.compute_ms, 2),
            "llm_ms": round(plan.summarizer.llm_ms, 2),
            "llm_calls": plan.summarizer.calls,
            "apply_ms": round((time.perf_counter() - t0) * 1000, 2),
            "total_ms": round(total, 2),
            # The service's own time around the model call.
            "overhead_ms": round(total - plan.summarizer.llm_ms, 2),
        }
        if cpu_started is not None:
            # This thread's CPU time (DB and model waits excluded): what the
            # run costs on a machine that is not otherwise busy.
            run.timings["cpu_ms"] = round((time.thread_time() - cpu_started) * 1000, 2)
        run.save()
    return run


def _ms(delta: timedelta) -> float:
    return round(delta.total_seconds() * 1000, 2)
