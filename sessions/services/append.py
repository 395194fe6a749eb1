"""The append path: tool calls and results paired, a batch inserted under the session lock.

It follows healthchecks' ``Check.ping``: do the slow work (tokenizing,
``prepare.prepare_messages_storing_outputs``) before taking the lock, then lock the session
row, take the next seq, insert, bump the cached counters, commit. Follow-up
work (the registry's ``after_append`` hooks) is enqueued with
``transaction.on_commit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from contextsvc import telemetry
from contextsvc.engine import user_agents
from contextsvc.errors import ValidationFailed
from sessions import hotpath, status
from sessions.extensions import REGISTRY
from sessions.models import Message, Session
from sessions.outputs.budget import apply_tool_outputs
from sessions.outputs.ingest import save_pending_outputs

from .exact_counts import exact_counts_enqueue
from .idempotency import idempotency_record_create, replayed_response
from .inputs import MessageData
from .prepare import Prepared, prepare_messages_storing_outputs


def _match_tool_calls(open_calls: dict[str, str], prepared: list[Prepared]) -> dict[str, str]:
    """Check the batch's calls and results against the open calls; return the calls left open.

    A result answers the open call of its id (``engine.pairing``: the most
    recent call of that id, since no id is ever open twice). An id may be
    used again once its call was answered, as OpenAI accepts and agents do
    (a tau-bench GPT-4o run reuses one); the build gives every request unique
    ids (``engine.wellformed``). A call whose id is still open is refused: its
    result could not say which of the two calls it answers.
    """
    open_calls = dict(open_calls)
    for i, p in enumerate(prepared):
        msg = p.message
        if msg.role == "assistant":
            for k, call in enumerate(msg.tool_calls):
                if call.id in open_calls:
                    raise _open_call_repeated(i, k, call.id, "in this session")
                open_calls[call.id] = call.name
        elif msg.role == "tool":
            name = open_calls.pop(msg.tool_call_id or "", None)
            if name is None:
                raise ValidationFailed(
                    f"messages[{i}].tool_call_id {msg.tool_call_id!r} matches no open tool call "
                    "of this session",
                    details={"field": f"messages.{i}.tool_call_id"},
                )
            if not p.row["name"]:
                p.row["name"] = name
    return open_calls


def _open_call_repeated(i: int, k: int, call_id: str, where: str) -> ValidationFailed:
    return ValidationFailed(
        f"messages[{i}].tool_calls[{k}].id {call_id!r} repeats a tool call that is still open"
        f" {where}; a tool-call id may be used again only once its call was answered",
        details={"field": f"messages.{i}.tool_calls.{k}.id"},
    )


def _duplicate_call_id(messages: Sequence[MessageData]) -> None:
    """422 when a call of the batch repeats the id of an unanswered call earlier in the batch.

    The same rule as ``_match_tool_calls`` on the batch alone, before any
    output is stored or token counted; the session's own open calls are
    checked under the lock.
    """
    open_ids: set[str] = set()
    for i, data in enumerate(messages):
        for k, call in enumerate(data.get("tool_calls") or ()):
            if call["id"] in open_ids:
                raise _open_call_repeated(i, k, call["id"], "earlier in this batch")
            open_ids.add(call["id"])
        if data.get("role") == "tool":
            open_ids.discard(data.get("tool_call_id") or "")


# What an append changes on the session row (one precompiled UPDATE).
APPEND_FIELDS = (
    "open_tool_calls",
    "last_seq",
    "message_count",
    "live_message_count",
    "conversation_tokens",
    "updated_at",
    "guard_status",
    "used_tokens",
    "tool_output_tokens",
    "tool_trim_seq",
    "tool_count_window_seq",
    "reserved_tokens",
    "tool_reservations",
    "tool_budget_exceeded",
)


def _check_batch_size(messages: Sequence[MessageData]) -> None:
    if not messages:
        raise ValidationFailed("Conversation has no messages", details={"field": "messages"})
    if len(messages) > settings.CONTEXTSVC_MAX_BATCH:
        raise ValidationFailed(
            f"At most {settings.CONTEXTSVC_MAX_BATCH} messages per request "
            f"(got {len(messages)}); post them in several batches",
            details={"field": "messages"},
        )


def session_append_messages(
    *,
    session: Session,
    messages: Sequence[MessageData],
    idempotency_key: str | None = None,
    fingerprint: str = "",
    notify: bool = True,
    savepoint: bool = True,
) -> dict[str, Any]:
    """Append a batch; returns the API response (also what a retry replays).

    With an ``idempotency_key``, ``fingerprint`` is the batch's
    ``idempotency.request_fingerprint``. ``notify=False`` leaves out the
    ``after_append`` hooks: for a caller whose same transaction reports usage
    next, which runs them on the newer state (the proxy storing a reply).
    ``savepoint=False``: inside a caller's transaction that any error rolls
    back whole (the proxy's sync and stored reply), no SAVEPOINT / RELEASE
    (two round trips); a refused batch then dooms that transaction.
    """
    if not telemetry.enabled():
        return _append(session, messages, idempotency_key, fingerprint, notify, savepoint)
    attributes = telemetry.session_attributes(session, "contextsvc.append")
    with telemetry.span("contextsvc.append", attributes) as span:
        response = _append(session, messages, idempotency_key, fingerprint, notify, savepoint)
        span.set_attribute("contextsvc.messages", len(response["messages"]))
        span.set_attribute(
            "contextsvc.tokens_added", sum(m["token_count"] for m in response["messages"])
        )
        span.set_attribute("contextsvc.context.tokens", response["budget"]["used"])
        span.set_attribute("contextsvc.guard", response["budget"]["guard"]["status"])
        return response


def _first_user_text(session: Session, messages: Sequence[MessageData]) -> tuple[str, ...]:
    """Set ``first_user_text`` once, from the session's first user message with text: the
    extra field to save, or () (every later append costs one attribute read)."""
    if session.first_user_text:
        return ()
    for data in messages:
        if data.get("role") == "user":
            text = user_agents.first_user_text(dict(data))
            if text:
                session.first_user_text = text
                return ("first_user_text",)
    return ()


def _append(
    session: Session,
    messages: Sequence[MessageData],
    idempotency_key: str | None,
    fingerprint: str,
    notify: bool = True,
    savepoint: bool = True,
) -> dict[str, Any]:
    _check_batch_size(messages)
    if idempotency_key:
        replay = replayed_response(session, idempotency_key, fingerprint)
        if replay is not None:
            return replay
    _duplicate_call_id(messages)
    # Tokenizing is the slow part: do it before taking the row lock.
    prepared = prepare_messages_storing_outputs(session, messages)
    if not idempotency_key:
        response = _append_unlocked(session, prepared, messages, notify)
        if response is not None:
            return response
    with transaction.atomic(savepoint=savepoint):
        session = hotpath.relock_session(session, exclude=hotpath.HEAVY_FIELDS)
        if idempotency_key:
            # A concurrent retry may have committed while we tokenized.
            replay = replayed_response(session, idempotency_key, fingerprint)
            if replay is not None:
                return replay
        session.open_tool_calls = _match_tool_calls(session.open_tool_calls or {}, prepared)
        first = session.last_seq + 1
        save_pending_outputs(session, prepared)
        # docs/concepts/trimming.md#budget-trim budget trim and
        # docs/concepts/guard.md#tool-preflight tool preflight, from cached counters.
        tool_effects = apply_tool_outputs(session, prepared, first)
        if tool_effects.budget_exceeded:
            status.session_mark_final(session=session, reason="toolBudgetExceeded")
        rows, state = _count_in(session, prepared, first)
        with hotpath.pipelined():  # the INSERT and the UPDATE in one round trip
            hotpath.insert_messages(rows)
            hotpath.save_fields(session, APPEND_FIELDS + _first_user_text(session, messages))
        response = _response(session, rows, prepared, tool_effects, state)
        if idempotency_key:
            idempotency_record_create(
                session=session, key=idempotency_key, fingerprint=fingerprint, response=response
            )
        _after_commit(session, rows, state, tool_effects, notify)
    return response


def _append_unlocked(
    session: Session, prepared: list[Prepared], messages: Sequence[MessageData], notify: bool
) -> dict[str, Any] | None:
    """The append without the row lock, when it writes nothing but the
    messages and the session row (no tool results, no idempotency record):
    the new values are worked out from the row as read with the key and
    written in one statement only if the row is still that version
    (``hotpath.append_unlocked``). None: not such a batch, or the row changed
    in between; the caller then appends under the lock."""
    version = getattr(session, "_row_version", None)
    if (
        version is None
        or session.tool_count_window_seq != session.window_start_seq
        or any(p.message.role == "tool" or p.pending is not None for p in prepared)
    ):
        return None
    session._row_version = None  # spent: whatever happens, the row is read again
    try:
        open_calls = _match_tool_calls(session.open_tool_calls or {}, prepared)
    except ValidationFailed:
        return None  # maybe stale: decided again under the lock
    # Changed in place: on a failure the locked append reads the row afresh.
    session.open_tool_calls = open_calls
    first = session.last_seq + 1
    tool_effects = apply_tool_outputs(session, prepared, first)
    rows, state = _count_in(session, prepared, first)
    fields = APPEND_FIELDS + _first_user_text(session, messages)
    if not hotpath.append_unlocked(session, version, fields, rows):
        return None
    response = _response(session, rows, prepared, tool_effects, state)
    _after_commit(session, rows, state, tool_effects, notify)
    return response


def _count_in(session: Session, prepared: list[Prepared], first: int) -> tuple[list[Message], Any]:
    """The batch's rows, and the session's counters and guard moved past them."""
    now = timezone.now()
    rows = [
        Message(session=session, seq=first + i, created_at=now, **p.row)
        for i, p in enumerate(prepared)
    ]
    session.last_seq = first + len(rows) - 1
    session.message_count += len(rows)
    session.live_message_count += len(rows)
    session.conversation_tokens += sum(p.row["token_count"] for p in prepared)
    session.updated_at = now
    return rows, status.refresh_guard(session)


def _response(
    session: Session, rows: list[Message], prepared: list[Prepared], tool_effects: Any, state: Any
) -> dict[str, Any]:
    return {
        "session_id": session.external_id,
        "messages": [
            {
                "seq": row.seq,
                "role": row.role,
                "token_count": row.token_count,
                "token_count_estimated": row.token_count_estimated,
                "output_ref": row.output_ref,
                "view": row.view_state,
                "ref": p.ref,
            }
            for row, p in zip(rows, prepared, strict=True)
        ],
        "trimmed_seqs": tool_effects.trimmed_seqs,
        "budget": state.to_dict(),
    }


def _after_commit(
    session: Session, rows: list[Message], state: Any, tool_effects: Any, notify: bool
) -> None:
    """The follow-up work, once the append is committed (at once in autocommit)."""
    # "tool_overflow": an output did not fit, compaction is due whatever the tier.
    last_role = "tool_overflow" if tool_effects.overflow_seqs else rows[-1].role
    for hook in REGISTRY.after_append if notify else ():
        transaction.on_commit(lambda hook=hook: hook(session, state, last_role))
    estimated = [row.seq for row in rows if row.token_count_estimated]
    if estimated:
        pk = session.pk
        transaction.on_commit(lambda: exact_counts_enqueue(session_id=pk, seqs=estimated))
