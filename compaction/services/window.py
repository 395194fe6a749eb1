"""Moving a session's live window: message views (logged as ViewChange), cached counters.

Shared by applying a compaction (``apply``) and restoring a snapshot
(``snapshots``). The caller holds the session row lock and saves the session
with ``WINDOW_FIELDS`` plus what ``recount_tool_outputs`` returns.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Count, Sum
from django.utils import timezone

from contextsvc.engine.build import message_to_dict
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.recall import search_available
from contextsvc.engine.strategies.base import TokenCounter
from contextsvc.engine.summary_placement import preamble
from sessions import accounting, status
from sessions.live import live_q
from sessions.models import Message, Session
from sessions.outputs.budget import session_recount_tool_outputs

from ..models import ViewChange

# The session columns ``set_window`` changes (plus open tool calls, which a
# compaction prunes), for ``save(update_fields=...)``.
WINDOW_FIELDS = [
    "retain",
    "summary",
    "summary_tokens",
    "window_start_seq",
    "head_end_seq",
    "conversation_tokens",
    "live_message_count",
    "guard_status",
    "used_tokens",
    "updated_at",
    "open_tool_calls",
]
TOOL_OUTPUT_FIELDS = ["tool_output_tokens", "tool_trim_seq", "tool_count_window_seq"]


def view_key(msg: EngineMessage) -> tuple[Any, ...]:
    """What a message's in-context view is: a change here is a view change."""
    return (msg.view, msg.view_state, msg.token_count)


def snapshot_message(msg: EngineMessage) -> dict[str, Any]:
    """A window message as a snapshot stores it."""
    out = message_to_dict(msg)
    # Whether ``content`` is a view (so a restore can put the view back as one).
    out["has_view"] = msg.view is not None
    return out


def recount_tool_outputs(session: Session) -> list[str]:
    """The cached tool-output counters (docs/concepts/guard.md#tool-preflight), after views
    changed in place; returns the fields to save."""
    session_recount_tool_outputs(session)
    return TOOL_OUTPUT_FIELDS


def set_message_views(
    session: Session, desired: dict[int, tuple[str | None, str, int]]
) -> list[ViewChange]:
    """Write the views in ``desired`` (seq → view, state, tokens) on the messages;
    return the unsaved ViewChange rows that log the old ones."""
    if not desired:
        return []
    rows = list(
        Message.objects.filter(session=session, seq__in=list(desired)).only(
            "id", "seq", "view", "view_state", "token_count", "trim_info"
        )
    )
    now = timezone.now().isoformat()
    changes: list[ViewChange] = []
    changed_rows = []
    for row in rows:
        view, state, tokens = desired[row.seq]
        if (row.view, row.view_state, row.token_count) == (view, state, tokens):
            continue
        changes.append(
            ViewChange(
                session=session,
                seq=row.seq,
                old_view=row.view,
                old_state=row.view_state,
                old_tokens=row.token_count,
                new_view=view,
                new_state=state,
                new_tokens=tokens,
            )
        )
        if state == "full":
            row.trim_info = None
        elif state != row.view_state:
            # Why the placeholder (the inspector explains it); a restore puts "full" back.
            row.trim_info = {
                "reason": "compaction",
                "detail": f"view {row.view_state} → {state} by a compaction",
                "at": now,
                "tokens_before": row.token_count,
            }
        row.view, row.view_state, row.token_count = view, state, tokens
        changed_rows.append(row)
    if changed_rows:
        # One statement run for many parameter sets: bulk_update's CASE WHEN per
        # row costs ~0.3 ms of query building each in Python.
        quote = connection.ops.quote_name
        sql = (
            f"UPDATE {quote(Message._meta.db_table)} SET {quote('view')} = %s,"
            f" {quote('view_state')} = %s, {quote('token_count')} = %s,"
            f" {quote('trim_info')} = %s WHERE {quote('id')} = %s"
        )
        prep = Message._meta.get_field("trim_info").get_db_prep_save
        with connection.cursor() as cursor:
            cursor.executemany(
                sql,
                [
                    (r.view, r.view_state, r.token_count, prep(r.trim_info, connection), r.pk)
                    for r in changed_rows
                ],
            )
    return changes


def set_window(
    session: Session,
    *,
    retain: str,
    summary: str,
    start_seq: int,
    counter: TokenCounter,
    head_end_seq: int = 0,
) -> accounting.BudgetState:
    """Move the live window and recount its cached counters (caller holds the lock and saves).

    ``head_end_seq``: a sandwich's head (seqs up to it) stays live before the
    summary; 0 (the default, every other caller) means no head. One aggregate
    counts head and tail together: the counters cover exactly what is sent.
    """
    session.retain = retain
    session.summary = summary
    session.summary_tokens = counter.messages(
        preamble(retain, summary, search_available(session.policy))
    )
    session.window_start_seq = start_seq
    session.head_end_seq = head_end_seq if 0 < head_end_seq < start_seq else 0
    agg = Message.objects.filter(
        live_q(session), session=session, retracted_at__isnull=True
    ).aggregate(tokens=Sum("token_count"), n=Count("id"))
    session.conversation_tokens = agg["tokens"] or 0
    session.live_message_count = agg["n"] or 0
    state = status.refresh_guard(session)
    session.updated_at = timezone.now()
    return state
