"""Reads of sessions data: sessions, their live messages as the engine sees them, usage reports.

Every lookup takes the owner, so a stranger's session id is a 404, never a
403 that confirms it exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.db.models import TextField
from django.db.models.functions import Cast

from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import ToolCall
from contextsvc.engine.window_stats import WindowStats, window_stats
from contextsvc.errors import NotFound
from contextsvc.lru import BoundedLRU

from . import accounting
from .extensions import REGISTRY
from .live import live_q
from .models import AgentKey, Message, Session, UsageReport


def app_budget_blocks(session: Session) -> dict[str, Any]:
    """Blocks other apps add to the budget (prompting: cache, deferral, degraded;
    compaction: auto, circuit breaker)."""
    out: dict[str, Any] = {}
    for hook in REGISTRY.budget_blocks:
        out.update(hook(session))
    return out


def is_session_id(external_id: str) -> bool:
    """Whether ``external_id`` could name a session: fits the column, no NUL
    (the database would refuse the lookup itself; such an id is simply not found)."""
    return 0 < len(external_id) <= 128 and "\x00" not in external_id


def session_get(*, owner: AgentKey, external_id: str, defer_tools: bool = False) -> Session:
    if not is_session_id(external_id):
        raise NotFound(f"Session {external_id!r} not found")
    qs = Session.objects.filter(owner=owner, external_id=external_id)
    if defer_tools:
        # The tool definitions can be a megabyte of JSON (300 MCP tools); the
        # context build and tool_search get them from a per-process cache keyed
        # by their digest (the prompting app's registered tools) instead.
        qs = qs.defer("tools")
    session = qs.first()
    if session is None:
        raise NotFound(f"Session {external_id!r} not found")
    return session


def session_list(
    *,
    owner: AgentKey,
    agent: str | None = None,
    status: str | None = None,
    cursor: int | None = None,
    limit: int = 50,
) -> tuple[list[Session], int | None]:
    qs = Session.objects.filter(owner=owner).order_by("-id")
    if agent:
        qs = qs.filter(agent=agent)
    if status:
        qs = qs.filter(status=status)
    if cursor:
        qs = qs.filter(id__lt=cursor)
    page = list(qs[: limit + 1])
    next_cursor = page[limit - 1].id if len(page) > limit else None
    return page[:limit], next_cursor


# --- live messages as the engine sees them -------------------------------------------

MESSAGE_FIELDS = (
    "seq",
    "role",
    "content",
    "parts",
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning",
    "output_ref",
    "view",
    "view_state",
    "token_count",
    "pinned",
)
# MESSAGE_FIELDS with the JSON columns read as text (annotations of live_messages):
# Django's JSONField converter costs ~7 µs per value, half the time of a
# 2,000-message build; orjson parses them in ``row_to_message``.
_FAST_MESSAGE_FIELDS = tuple(
    {"parts": "_parts", "tool_calls": "_calls"}.get(f, f) for f in MESSAGE_FIELDS
)


def json_text(value: str | None) -> Any:
    """A JSON column read as text, parsed with orjson (None stays None)."""
    # Most rows hold "[]" or NULL: skip the parser for those.
    if value is None:
        return None
    if value == "[]":
        return []
    return orjson.loads(value)


def row_to_message(row: tuple) -> EngineMessage:
    """The one reader of a stored message: a row of ``MESSAGE_FIELDS`` whose
    ``parts`` and ``tool_calls`` are JSON text → the engine's Message."""
    (
        seq,
        role,
        content,
        parts,
        tool_calls,
        tool_call_id,
        name,
        reasoning,
        output_ref,
        view,
        view_state,
        token_count,
        pinned,
    ) = row
    parts = json_text(parts)
    # Compaction's tool clearing marks an assistant message "cleared" when its
    # call inputs were cleared: the stored arguments stay for audit, the
    # context sends none (token_count was recounted that way).
    inputs_cleared = role == "assistant" and view_state == "cleared"
    return EngineMessage(
        role=role,
        content=parts if parts is not None else content,
        tool_calls=tuple(
            ToolCall(
                id=c["id"],
                name=c["name"],
                arguments={} if inputs_cleared else (c.get("arguments") or {}),
            )
            for c in json_text(tool_calls) or ()
        ),
        tool_call_id=tool_call_id,
        name=name,
        reasoning=reasoning,
        output_ref=output_ref,
        view=view,
        view_state=view_state,
        seq=seq,
        token_count=token_count,
        pinned=bool(pinned),
    )


@dataclass(frozen=True, slots=True)
class StoredCount:
    """One stored message as its token count sees it (``sessions.services.exact_counts``)."""

    pk: int
    message: EngineMessage
    estimated: bool
    retracted: bool


def message_stored_count(session_id: int, seq: int) -> StoredCount | None:
    """Message ``seq`` of session ``session_id`` (by pk: only background work asks), or None."""
    row = (
        Message.objects.filter(session_id=session_id, seq=seq)
        .annotate(_parts=Cast("parts", TextField()), _calls=Cast("tool_calls", TextField()))
        .values_list(*_FAST_MESSAGE_FIELDS, "pk", "token_count_estimated", "retracted_at")
        .first()
    )
    if row is None:
        return None
    n = len(_FAST_MESSAGE_FIELDS)
    pk, estimated, retracted_at = row[n:]
    return StoredCount(pk, row_to_message(row[:n]), estimated, retracted_at is not None)


# Assistant messages read back looking for an open call's arguments: a result
# answers one of the newest calls (an agent posts results right after them).
_CALL_LOOKBACK = 50


def tool_call_arguments(session: Session, call_id: str) -> dict[str, Any]:
    """The arguments of the stored call ``call_id`` ({} when none of the newest calls is it)."""
    rows = (
        Message.objects.filter(session=session, role="assistant")
        .exclude(tool_calls=[])
        .order_by("-seq")
        .values_list("tool_calls", flat=True)[:_CALL_LOOKBACK]
    )
    for calls in rows:
        for call in calls or ():
            if isinstance(call, dict) and call.get("id") == call_id:
                arguments = call.get("arguments")
                return arguments if isinstance(arguments, dict) else {}
    return {}


def estimated_messages(*, created_before: datetime, limit: int) -> list[tuple[int, int]]:
    """``(session pk, seq)`` of messages still carrying an append's estimate,
    oldest first (a partial index holds only those, so this reads no other row)."""
    return list(
        Message.objects.filter(token_count_estimated=True, created_at__lt=created_before)
        .order_by("created_at")
        .values_list("session_id", "seq")[:limit]
    )


def live_messages(
    session: Session, *, after_seq: int = 0, through_seq: int | None = None
) -> list[EngineMessage]:
    """The live window (after the newest snapshot; a sandwich's head first), oldest first.

    ``after_seq`` / ``through_seq`` bound the seqs read (the context cache
    reads only what was appended since).
    """
    qs = Message.objects.filter(live_q(session), session=session, retracted_at__isnull=True)
    if after_seq:
        qs = qs.filter(seq__gt=after_seq)
    if through_seq is not None:
        qs = qs.filter(seq__lte=through_seq)
    rows = (
        qs.order_by("seq")
        .annotate(_parts=Cast("parts", TextField()), _calls=Cast("tool_calls", TextField()))
        .values_list(*_FAST_MESSAGE_FIELDS)
    )
    return [row_to_message(r) for r in rows]


@dataclass(frozen=True, slots=True)
class _Window:
    created_at: Any  # with the pk, names the session even where pks are reused (test rollbacks)
    window_start_seq: int
    head_end_seq: int
    last_seq: int
    tokens: int
    trim_seq: Any
    messages: tuple[EngineMessage, ...]
    # The context record's figures of ``messages`` (largest, placeholders),
    # extended with each append's messages rather than recomputed per build.
    stats: WindowStats


# Per-process cache of converted live windows for context builds: an agent
# asks for the context of the same session before every call, and re-reading
# and converting 2,000 messages is most of a build's time. Messages are
# append-only; what can change in old rows is their view (trim, clearing), and
# every such change moves the session's cached ``conversation_tokens`` (the sum
# of the live window's token counts, kept in the same transaction) — so a
# cached window is reused only when the counters on the freshly read session
# row say nothing but appends happened since. Bounded by the messages held.
CONTEXT_CACHE_MAX_MESSAGES = 100_000
_WINDOWS: BoundedLRU[int, _Window] = BoundedLRU(
    CONTEXT_CACHE_MAX_MESSAGES,
    max_weight=CONTEXT_CACHE_MAX_MESSAGES,
    weigh=lambda window: len(window.messages),
)


def _window_key(session: Session) -> tuple[Any, int, int, Any]:
    return (
        session.created_at,
        session.window_start_seq,
        getattr(session, "head_end_seq", 0) or 0,
        getattr(session, "tool_trim_seq", None),
    )


def context_messages(session: Session) -> list[EngineMessage]:
    """``live_messages`` for a build, read incrementally when it is safe."""
    return context_window(session)[0]


def context_window(session: Session) -> tuple[list[EngineMessage], WindowStats]:
    """``context_messages`` and their ``WindowStats``: when only appends happened
    since the cached window, both are extended by the new messages alone."""
    cached = _WINDOWS.get(session.pk)
    created, start, head_end, trim_seq = _window_key(session)
    messages: list[EngineMessage] | None = None
    if (
        cached is not None
        and (cached.created_at, cached.window_start_seq, cached.head_end_seq, cached.trim_seq)
        == (created, start, head_end, trim_seq)
        and cached.last_seq <= session.last_seq
    ):
        new = (
            live_messages(session, after_seq=cached.last_seq, through_seq=session.last_seq)
            if cached.last_seq < session.last_seq
            else []
        )
        total = cached.tokens + sum(m.token_count or 0 for m in new)
        count = len(cached.messages) + len(new)
        if total == session.conversation_tokens and count == session.live_message_count:
            if cached.last_seq == session.last_seq:
                return list(cached.messages), cached.stats
            messages = [*cached.messages, *new]
            stats = window_stats(messages, cached.stats)
    if messages is None:
        messages = live_messages(session, through_seq=session.last_seq)
        stats = window_stats(messages)
        total = sum(m.token_count or 0 for m in messages)
        if total != session.conversation_tokens or len(messages) != session.live_message_count:
            # Counters and rows disagree (a write in flight): use, do not keep.
            return messages, stats
    _WINDOWS.put(
        session.pk,
        _Window(
            created, start, head_end, session.last_seq, total, trim_seq, tuple(messages), stats
        ),
    )
    return messages, stats


# --- usage and the session as the API shows it ------------------------------------------


def session_usage_reports(session: Session, *, limit: int = 20) -> list[dict[str, Any]]:
    """Estimate and provider-reported tokens side by side, newest first."""
    reports = UsageReport.objects.filter(session=session).order_by("-id")[:limit]
    return [
        {
            "through_seq": r.through_seq,
            "estimated_tokens": r.estimated_tokens,
            "reported_total_tokens": r.total_tokens,
            "input_tokens": r.input_tokens,
            "output_tokens": r.output_tokens,
            "cache_creation_tokens": r.cache_creation_tokens,
            "cache_read_tokens": r.cache_read_tokens,
            "difference": r.total_tokens - r.estimated_tokens,
            "created_at": r.created_at,
        }
        for r in reports
    ]


def session_to_dict(
    session: Session, *, state: accounting.BudgetState | None = None
) -> dict[str, Any]:
    state = state or accounting.compute_budget(session)
    return {
        "id": session.external_id,
        "agent": session.agent,
        "model": session.model,
        "provider": session.provider,
        "status": session.status,
        "final_reason": session.final_reason or None,
        "context_window": session.context_window,
        "max_output_tokens": session.max_output_tokens,
        "buffer_tokens": session.buffer_tokens,
        "tokenizer": session.tokenizer,
        "policy": session.policy,
        "message_count": session.message_count,
        "live_message_count": session.live_message_count,
        "last_seq": session.last_seq,
        "window_start_seq": session.window_start_seq,
        "head_end_seq": session.head_end_seq,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "budget": state.to_dict(),
    }
