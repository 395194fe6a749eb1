"""The session's PromptState row: reading, creating and locking it, and degradation entries."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from sessions.models import Session

from ..models import PromptState
from .chain import held

# How many failures a session keeps for the budget to show.
DEGRADED_LOG_SIZE = 20

# Columns only context builds read: tool_search and PUT tools lock the row without them.
BUILD_ONLY_FIELDS = (
    "last_chain",
    "last_build",
    "last_cached",
    "cache_totals",
    "degraded_log",
    "last_deferral",
)


def _rows(session: Session) -> QuerySet[PromptState]:
    """The session's state row; without the cache chain (16 KB at 2,000 messages) when this
    process knows the one the row held (``chain.held``: used when the tags agree)."""
    rows = PromptState.objects.filter(session_id=session.pk)
    return rows.defer("last_chain") if held(session.pk) else rows


def state_read(session: Session) -> PromptState:
    """The session's state as stored, or a fresh unsaved one: a read never creates it."""
    state = _rows(session).first()
    return state if state is not None else PromptState(session_id=session.pk)


def state_get_or_create(session: Session) -> PromptState:
    """The session's state, created on first use."""
    state = _rows(session).first()
    if state is not None:
        return state
    try:
        with transaction.atomic():
            return PromptState.objects.create(session_id=session.pk)
    except IntegrityError:
        # A concurrent build created it first.
        return PromptState.objects.get(session_id=session.pk)


def locked_state(session: Session, *, defer: Sequence[str] = ()) -> PromptState:
    """The state under its own row lock (not the session's); created if missing."""
    qs = PromptState.objects.select_for_update()
    if defer:
        qs = qs.defer(*defer)
    state = qs.filter(session_id=session.pk).first()
    if state is None:
        state_get_or_create(session)  # created by whoever gets there first
        state = qs.get(session_id=session.pk)
    return state


def degraded_entry(component: str, exc: BaseException) -> dict[str, str]:
    """docs/concepts/caching.md#degradation: what fell back and why, for the budget's
    ``degraded``."""
    return {
        "component": component,
        "error": f"{type(exc).__name__}: {exc}"[:500],
        "at": timezone.now().isoformat(),
    }
