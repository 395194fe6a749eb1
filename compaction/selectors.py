"""Reads for compaction: windows to compact, runs, snapshots, the budget block.

Every lookup for the API takes the owner, so another key's run or snapshot is
a 404. Windows are loaded as *views*: a message whose view differs from its
content (a cut, trimmed or cleared tool output) never has its content read —
the full output lives in the tool output cache (``ToolOutput``) anyway, and
nothing here reads that table, so compacting a session holding 200 MB of
outputs costs what its views cost.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection
from django.db.models import Case, F, TextField, Value, When
from django.db.models.functions import Cast
from django.utils import timezone

from contextsvc.engine.build import message_to_dict
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.errors import NotFound
from sessions.live import has_head
from sessions.models import AgentKey, Message, Session
from sessions.selectors import MESSAGE_FIELDS, row_to_message

from .models import CompactionRun, CompactionState, Snapshot
from .reason_text import reason_text

BREAKER_THRESHOLD = 3


def _view_fields() -> tuple[Any, ...]:
    # content/parts only where there is no view: the view is what the model sees.
    # JSON comes back as text and is parsed with orjson (a window is thousands of rows).
    content = Case(
        When(view__isnull=True, then=F("content")), default=Value(""), output_field=TextField()
    )
    parts = Case(
        When(view__isnull=True, then=Cast("parts", TextField())),
        default=Value(None, output_field=TextField()),
        output_field=TextField(),
    )
    # The reader's column order (sessions.selectors.MESSAGE_FIELDS), with these three swapped in.
    swapped = {"content": content, "parts": parts, "tool_calls": Cast("tool_calls", TextField())}
    return tuple(swapped.get(f, f) for f in MESSAGE_FIELDS)


def window_messages(
    session: Session, *, start_seq: int, through_seq: int | None = None
) -> list[EngineMessage]:
    """Messages ``start_seq`` … ``through_seq`` (inclusive) as the engine sees them."""
    # Retracted messages stay in the transcript but are out of every window.
    qs = Message.objects.filter(session=session, seq__gte=start_seq, retracted_at__isnull=True)
    if through_seq is not None:
        qs = qs.filter(seq__lte=through_seq)
    rows = qs.order_by("seq").values_list(*_view_fields())
    return [row_to_message(row) for row in rows]


def head_messages(session: Session) -> list[EngineMessage]:
    """The sandwich's head (docs/concepts/compaction.md#sandwich-head): seqs up to ``head_end_seq``
    when they are apart from the window; [] without one."""
    if not has_head(session):
        return []
    return window_messages(session, start_seq=1, through_seq=session.head_end_seq)


def transcript_messages(session: Session, *, through_seq: int) -> list[EngineMessage]:
    return window_messages(session, start_seq=1, through_seq=through_seq)


# --- runs -----------------------------------------------------------------------------


def run_get(*, owner: AgentKey, run_id: str) -> CompactionRun:
    try:
        pk = uuid.UUID(str(run_id))
    except ValueError:
        raise NotFound(f"Compaction run {run_id!r} not found") from None
    run = (
        CompactionRun.objects.select_related("session").filter(pk=pk, session__owner=owner).first()
    )
    if run is None:
        raise NotFound(f"Compaction run {run_id!r} not found")
    return run


def run_list(*, session: Session, limit: int = 20) -> list[CompactionRun]:
    return list(CompactionRun.objects.filter(session=session).order_by("-created_at")[:limit])


def compact_result(run: CompactionRun) -> dict[str, Any] | None:
    """docs/concepts/compaction.md#compact-result of a finished run."""
    if run.before_tokens is None:
        return None
    return {
        "before_tokens": run.before_tokens,
        "after_tokens": run.after_tokens,
        "before_msg_count": run.before_msg_count,
        "after_msg_count": run.after_msg_count,
        "strategies_run": run.strategies_run,
    }


def run_to_dict(run: CompactionRun, *, detail: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "run_id": str(run.pk),
        "session_id": run.session.external_id,
        "trigger": run.trigger,
        # docs/concepts/compaction.md#reasons: null for a run recorded before reasons were.
        "reason": run.reason or None,
        "reason_text": reason_text(run.reason) or None,
        "status": run.status,
        "strategy": run.strategy,
        "chain": run.chain,
        "forced": run.forced,
        "changed": run.changed,
        "result": compact_result(run),
        "retention_score": run.retention_score,
        # Who wrote the run's summary (none: no summary was written).
        "summarizer": run.summarizer or None,
        "model": run.model or None,
        "error": {"code": run.error_code, "message": run.error} if run.error_code else None,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }
    snapshot_id = (
        Snapshot.objects.filter(run=run).values_list("pk", flat=True).first() if detail else None
    )
    if detail:
        out.update(
            {
                "instructions": run.instructions or None,
                "retain_last_turns": run.retain_last_turns,
                "before_used": run.before_used,
                "after_used": run.after_used,
                "target_tokens": run.target_tokens,
                "through_seq": run.through_seq,
                "reports": run.reports,
                "retention": run.retention,
                "attempts": run.attempts,
                "timings": run.timings,
                "cost": run.cost,
                "snapshot_id": snapshot_id,
            }
        )
    return out


# --- snapshots --------------------------------------------------------------------------


def snapshot_latest(session: Session) -> Snapshot | None:
    return Snapshot.objects.filter(session=session).order_by("-id").first()


def snapshot_get(*, session: Session, snapshot_id: int) -> Snapshot:
    snapshot = Snapshot.objects.filter(session=session, pk=snapshot_id).first()
    if snapshot is None:
        raise NotFound(f"Snapshot {snapshot_id!r} not found")
    return snapshot


def snapshot_to_dict(snapshot: Snapshot, *, with_messages: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": snapshot.pk,
        "kind": snapshot.kind,
        "run_id": str(snapshot.run_id) if snapshot.run_id else None,
        "restored_from": snapshot.restored_from_id,
        "uncompacted": snapshot.uncompacted,
        "window_start_seq": snapshot.window_start_seq,
        "head_end_seq": snapshot.head_end_seq,
        "through_seq": snapshot.through_seq,
        "token_count": snapshot.token_count,
        "message_count": snapshot.message_count,
        "created_at": snapshot.created_at,
    }
    if with_messages:
        out["retain"] = snapshot.retain
        out["summary"] = snapshot.summary
        out["messages"] = snapshot.messages
    return out


def snapshot_list(*, session: Session, limit: int = 50) -> list[dict[str, Any]]:
    rows = Snapshot.objects.filter(session=session).order_by("-id").defer("messages")[:limit]
    return [snapshot_to_dict(s, with_messages=False) for s in rows]


def session_resume(session: Session) -> dict[str, Any]:
    """docs/concepts/compaction.md#resume: the newest snapshot plus the messages after it.

    A never-compacted session has no snapshot: its whole live window comes back
    (the fallback of docs/concepts/compaction.md#resume).
    """
    snapshot = snapshot_latest(session)
    after = snapshot.through_seq + 1 if snapshot is not None else session.window_start_seq
    later = [message_to_dict(m) for m in window_messages(session, start_seq=after)]
    snap = snapshot_to_dict(snapshot) if snapshot is not None else None
    if snap is not None and session.retract_count:
        # Messages the agent retracted after the snapshot was taken are out of it too.
        gone = set(
            Message.objects.filter(
                session=session,
                seq__gte=snapshot.window_start_seq,
                seq__lte=snapshot.through_seq,
                retracted_at__isnull=False,
            ).values_list("seq", flat=True)
        )
        if gone:
            snap["messages"] = [m for m in snap["messages"] if m.get("seq") not in gone]
    return {
        "session_id": session.external_id,
        "snapshot": snap,
        "later_messages": later,
        # Convenience: what to load to resume, in order.
        "retain": snap["retain"] if snap else session.retain,
        "summary": snap["summary"] if snap else session.summary,
        "messages": [*(snap["messages"] if snap else []), *later],
        "head_end_seq": snap["head_end_seq"] if snap else 0,
        "last_seq": session.last_seq,
    }


# --- state and the budget block -------------------------------------------------------------


def state_of(session: Session) -> CompactionState | None:
    return CompactionState.objects.filter(session=session).first()


def _tripped(failures: int | None) -> bool:
    """The circuit breaker is open: that many automatic runs failed in a row."""
    return failures is not None and failures >= BREAKER_THRESHOLD


def breaker_open_for(session: Session) -> bool:
    """Whether the session's breaker is open, reading its failure count alone: the
    checks after every append must not read the summary the state row holds."""
    return _tripped(
        CompactionState.objects.filter(session=session)
        .values_list("consecutive_failures", flat=True)
        .first()
    )


def auto_waits(session: Session) -> bool:
    """Would an automatic request find nothing to do now: the breaker open, or the newest
    run under way (not an emergency one) with a lease that has not lapsed?
    ``compaction_auto_request`` then returns without writing, so the check after
    every append stops here. One statement of plain SQL: the ORM's two queries cost
    about 1 ms a call to compile (a call every few seconds while a run waits in the
    queue), this one about 0.1 ms."""
    runs = CompactionRun._meta.db_table
    states = CompactionState._meta.db_table
    sql = (
        f"SELECT (SELECT consecutive_failures FROM {states} WHERE session_id = %s), "
        f"(SELECT CASE WHEN lease_expires_at IS NOT NULL AND lease_expires_at <= %s "
        f"THEN 1 ELSE 0 END FROM {runs} WHERE session_id = %s AND status IN (%s, %s) "
        f"AND {connection.ops.quote_name('trigger')} <> %s ORDER BY created_at DESC LIMIT 1)"
    )
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    active = CompactionRun.ACTIVE
    with connection.cursor() as cursor:
        cursor.execute(sql, [session.pk, now, session.pk, *active, CompactionRun.Trigger.EMERGENCY])
        failures, lapsed = cursor.fetchone()
    return _tripped(failures) or lapsed == 0


def _block_row(session: Session) -> tuple[int, Any, Any, str | None]:
    """The breaker's two columns and the active run (the oldest): (consecutive failures,
    breaker opened at, run id, run status). Two narrow queries: the state's summary is
    not read, and one query with subqueries cost more to compile than a round trip."""
    state = (
        CompactionState.objects.filter(session=session)
        .values_list("consecutive_failures", "breaker_opened_at")
        .first()
    )
    run = (
        CompactionRun.objects.filter(session=session, status__in=CompactionRun.ACTIVE)
        .values_list("pk", "status")
        .first()
    )
    failures, opened_at = state if state is not None else (0, None)
    run_id, run_status = run if run is not None else (None, None)
    return failures, opened_at, run_id, run_status


def budget_block(session: Session) -> dict[str, Any]:
    """``compaction`` in GET budget / context: is auto-compaction on, the breaker."""
    policy = (session.policy or {}).get("compaction") or {}
    failures, opened_at, run_id, run_status = _block_row(session)
    is_open = failures >= BREAKER_THRESHOLD
    return {
        "compaction": {
            "enabled": policy.get("enabled", True),
            "auto": policy.get("auto", True) and not is_open,
            "circuit_breaker": {
                "open": is_open,
                "consecutive_failures": failures,
                "threshold": BREAKER_THRESHOLD,
                "opened_at": opened_at,
            },
            "active_run": {"run_id": str(run_id), "status": run_status} if run_id else None,
        }
    }
