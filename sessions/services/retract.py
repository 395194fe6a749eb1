"""Retracting messages: an agent undoes or retries its last turn.

A retraction takes a suffix of the live window out of it — the last ``N``
live messages, or every live message from a seq on. The rows stay in the
transcript (``Message.retracted_at`` set, shown with a badge in the
inspector): nothing posted is lost, but they are never sent, counted,
compacted or resumed again. The cached counters move in the same
transaction, under the session row lock, as an append's do.

One rule keeps every later context well formed: a retraction never takes a
tool result away from a call that stays (the call would go out unanswered).
The cut must fall on a turn boundary — retract the assistant message that
made the call with its results. A cut inside an exchange is a 422 naming the
field (``from_seq`` or ``last``) and, in ``details``, the ``from_seq`` that
takes the whole exchange. Calls retracted while still open are closed with
them; their ids may be used again by the retried turn.

Repeating a ``from_seq`` retraction changes nothing (already retracted
messages are skipped); ``last`` counts live messages, so a retry of it goes
through the ``Idempotency-Key`` record, as an append's does.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from django.db import transaction
from django.utils import timezone

from contextsvc.errors import ValidationFailed
from sessions import hotpath, status
from sessions.live import has_head
from sessions.models import Message, Session
from sessions.outputs.budget import session_recount_tool_outputs

from .idempotency import idempotency_record_create, replayed_response

# What a retraction changes on the session row.
RETRACT_FIELDS = [
    "live_message_count",
    "conversation_tokens",
    "open_tool_calls",
    "reserved_tokens",
    "tool_reservations",
    "tool_output_tokens",
    "tool_trim_seq",
    "tool_count_window_seq",
    "retract_count",
    "guard_status",
    "used_tokens",
    "updated_at",
]
_ROW_FIELDS = ("pk", "seq", "role", "token_count", "tool_calls", "tool_call_id")


def _live(session: Session) -> Any:
    # The retractable part: from the window start on. A sandwich's head (the
    # conversation's start, kept live before the summary) is not: the summary
    # after it describes a middle that follows it.
    return Message.objects.filter(
        session=session, seq__gte=session.window_start_seq, retracted_at__isnull=True
    )


def _select(session: Session, last: int | None, from_seq: int | None) -> tuple[list[dict], str]:
    """The rows to retract (oldest first) and the request field that chose them."""
    if from_seq is not None:
        if has_head(session) and from_seq <= session.head_end_seq:
            raise ValidationFailed(
                f"from_seq {from_seq} is in the conversation's head (seqs up to "
                f"{session.head_end_seq}), kept by a sandwich compaction before its summary:"
                f" only messages from seq {session.window_start_seq} on can be retracted",
                details={"field": "from_seq"},
            )
        if from_seq < session.window_start_seq:
            raise ValidationFailed(
                f"from_seq {from_seq} is before the live window, which starts at seq "
                f"{session.window_start_seq}: those messages are already out of it",
                details={"field": "from_seq"},
            )
        if from_seq > session.last_seq:
            raise ValidationFailed(
                f"from_seq {from_seq} is after the last message (seq {session.last_seq})",
                details={"field": "from_seq"},
            )
        rows = list(_live(session).filter(seq__gte=from_seq).order_by("seq").values(*_ROW_FIELDS))
        return rows, "from_seq"
    assert last is not None
    rows = list(_live(session).order_by("-seq").values(*_ROW_FIELDS)[:last])
    if len(rows) < last:
        raise ValidationFailed(
            f"last is {last} but the live window holds {len(rows)} retractable message(s)"
            + (
                f" (the head, seqs up to {session.head_end_seq}, is kept)"
                if has_head(session)
                else ""
            ),
            details={"field": "last"},
        )
    rows.reverse()
    return rows, "last"


def _call_owner(session: Session, call_id: str, before_seq: int) -> int | None:
    """The seq of the live assistant message before ``before_seq`` that made ``call_id``."""
    candidates = (
        _live(session)
        .filter(role=Message.Role.ASSISTANT, seq__lt=before_seq)
        .order_by("-seq")
        .values_list("seq", "tool_calls")
    )
    for seq, calls in candidates.iterator(chunk_size=200):
        if any(c.get("id") == call_id for c in calls or ()):
            return seq
    return None


def _check_pairs(session: Session, rows: list[dict], field: str) -> set[str]:
    """422 when a retracted result answers a call that stays; returns the retracted call ids.

    Rows pair in order (``engine.pairing``): a result answers the latest
    unanswered call of its id, so a result whose id is only called again
    later in ``rows`` (a reused id) answers a call before them.
    """
    calls = {c["id"] for r in rows for c in (r["tool_calls"] or ())}
    waiting: set[str] = set()
    first = rows[0]["seq"]
    for row in rows:
        waiting.update(c["id"] for c in row["tool_calls"] or ())
        call_id = row["tool_call_id"]
        if row["role"] != Message.Role.TOOL or not call_id:
            continue
        if call_id in waiting:
            waiting.discard(call_id)
            continue
        owner = _call_owner(session, call_id, first)
        if owner is None:
            continue  # its call already left the window: the result stands alone
        raise ValidationFailed(
            f"{field}: the message at seq {row['seq']} is the result of tool call {call_id!r},"
            f" made at seq {owner}, which would stay without its result; retract whole tool"
            f" exchanges (from_seq {owner} takes this one)",
            details={"field": field, "from_seq": owner},
        )
    return calls


def retract_fingerprint(last: int | None, from_seq: int | None) -> str:
    """An Idempotency-Key's fingerprint for a retraction (never equal to an append's)."""
    body = orjson.dumps(
        {"retract": {"last": last, "from_seq": from_seq}}, option=orjson.OPT_SORT_KEYS
    )
    return hashlib.sha256(body).hexdigest()


def session_retract_messages(
    *,
    session: Session,
    last: int | None = None,
    from_seq: int | None = None,
    idempotency_key: str | None = None,
    fingerprint: str = "",
) -> dict[str, Any]:
    """Take the last ``last`` live messages, or those from ``from_seq`` on, out of the window.

    Exactly one of ``last`` / ``from_seq`` is given (the API schema checks it).
    Returns the API response, which a retry with the same key replays.
    """
    if idempotency_key:
        replay = replayed_response(session, idempotency_key, fingerprint)
        if replay is not None:
            return replay
    with transaction.atomic():
        session = hotpath.lock_session(session.pk, exclude=hotpath.HEAVY_FIELDS)
        if idempotency_key:
            replay = replayed_response(session, idempotency_key, fingerprint)
            if replay is not None:
                return replay
        rows, field = _select(session, last, from_seq)
        now = timezone.now()
        if rows:
            calls = _check_pairs(session, rows, field)
            Message.objects.filter(pk__in=[r["pk"] for r in rows]).update(retracted_at=now)
            session.live_message_count -= len(rows)
            session.conversation_tokens -= sum(r["token_count"] for r in rows)
            if calls:
                session.open_tool_calls = {
                    k: v for k, v in (session.open_tool_calls or {}).items() if k not in calls
                }
                reservations = {
                    k: v for k, v in (session.tool_reservations or {}).items() if k not in calls
                }
                session.tool_reservations = reservations
                session.reserved_tokens = sum(int(v) for v in reservations.values())
            if any(r["role"] == Message.Role.TOOL for r in rows):
                session_recount_tool_outputs(session)
            session.retract_count += 1
            session.updated_at = now
        state = status.refresh_guard(session)
        if rows:
            hotpath.save_fields(session, tuple(RETRACT_FIELDS))
        response = {
            "session_id": session.external_id,
            "retracted": [
                {"seq": r["seq"], "role": r["role"], "token_count": r["token_count"]} for r in rows
            ],
            "live_message_count": session.live_message_count,
            "budget": state.to_dict(),
        }
        if idempotency_key:
            idempotency_record_create(
                session=session, key=idempotency_key, fingerprint=fingerprint, response=response
            )
    return response
