"""The context for an LLM call: the one place that prepares, builds, records and
enforces it (``GET /context`` and the overflow endpoint both answer with it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from contextsvc import telemetry
from sessions.models import Session
from sessions.selectors import context_window
from sessions.services.preflight import session_context_preflight
from sessions.status import session_mark_final

from ..services.cache import account_build, build_record_save
from ..services.calls import context_call_record
from ..services.selection import plan_tools, tools_record_plan
from ..services.state import state_get_or_create
from .build import build_context, check_format


def context_for_call(
    *,
    session: Session,
    fmt: str,
    extra: int = 0,
    preflight: bool = True,
    source: str = "api",
    read: bool = False,
) -> dict[str, Any]:
    """The body to send next, with its budget; the build is recorded.

    In order: the preflight hooks (docs/concepts/guard.md#block-compacts-first: at block or final,
    compaction may make room first); the tool selection, saved; the build; on a
    ``final`` verdict the session is marked final (docs/concepts/guard.md#final-turn: the
    model is told to finish, so the session is); its cache accounting and
    record, saved. ``preflight=False`` when the caller has just compacted (the
    overflow endpoint): a second compaction could not make more room than that
    one. Every build leaves a ``ContextCall`` (what was sent, as sent), which
    the next usage report completes.

    ``read``: a look at the body, no model call follows (docs/api.md#context-purpose):
    no compaction first, no final mark, and nothing recorded or priced; the
    budget's cache figures are what the next call would get.
    """
    body, record = _traced(
        session,
        fmt,
        extra=extra,
        preflight=preflight and not read,
        source=source,
        apps_blocks=True,
        read=read,
    )
    record()
    return body


def context_for_call_deferred(
    *,
    session: Session,
    fmt: str,
    extra: int = 0,
    preflight: bool = True,
    source: str = "api",
) -> tuple[dict[str, Any], Callable[..., int | None]]:
    """``context_for_call``'s body, and the writing of its record as a callable.

    The proxy calls it once upstream has answered, before the reply is
    stored: a call's first byte does not wait for the record of its build
    (one transaction, its CPU). Until then the budget lacks its ``cache``,
    ``deferral`` and ``degraded`` blocks; the other apps' blocks (compaction's
    breaker) are left out: the proxy reads only the guard and the totals. The
    callable raises only what a failed transaction raises.
    """
    return _traced(
        session, fmt, extra=extra, preflight=preflight, source=source, apps_blocks=False, read=False
    )


def _traced(
    session: Session, fmt: str, **kw: Any
) -> tuple[dict[str, Any], Callable[..., int | None]]:
    """``_context_for_call`` (``kw``: its keyword arguments), in a span when tracing."""
    started = time.perf_counter()
    check_format(fmt)
    if not telemetry.enabled():
        return _context_for_call(session=session, fmt=fmt, started=started, **kw)
    attributes = telemetry.session_attributes(session, "contextsvc.context")
    with telemetry.span("contextsvc.context", {**attributes, "contextsvc.format": fmt}) as span:
        body, record = _context_for_call(session=session, fmt=fmt, started=started, **kw)
        budget = body["budget"]
        span.set_attribute("contextsvc.context.tokens", budget["used"])
        span.set_attribute("contextsvc.guard", budget["guard"]["status"])
        return body, record


def _context_for_call(
    *,
    session: Session,
    fmt: str,
    extra: int,
    preflight: bool,
    source: str,
    started: float,
    apps_blocks: bool,
    read: bool,
) -> tuple[dict[str, Any], Callable[..., int | None]]:
    if preflight:
        session = session_context_preflight(session=session, extra=extra)
    messages, stats = context_window(session)
    tool_plan = plan_tools(session, messages, load_state=state_get_or_create)
    tools_record_plan(session, tool_plan)
    body, parts, prompt_plan = build_context(
        session,
        fmt,
        messages,
        tool_plan,
        extra=extra,
        apps_blocks=apps_blocks,
        message_tokens=stats.tokens,
    )
    if body["budget"]["guard"]["status"] == "final" and not read:
        session_mark_final(session=session, reason="context")
    build_ms = (time.perf_counter() - started) * 1000
    budget = body["budget"]  # the caller may take it out of the body meanwhile

    def record(request: dict[str, Any] | None = None) -> int | None:
        """Write the record; its ``ContextCall`` id (None: not known). ``request``: a
        proxied call's account of the client's request (``ContextCall.request``)."""
        built = account_build(session, fmt, parts, tool_plan, prompt_plan)
        if read:  # the provider sees nothing: its cache and the costs stay as they are
            budget.update(built.blocks())
            return None
        # One commit for the build's two writes (the state, the record): a second
        # commit would cost a second WAL flush, the larger part of the record's price.
        outermost = not connection.in_atomic_block
        with transaction.atomic():
            if outermost:  # a caller's transaction keeps its own durability
                _commit_without_flush()
            build_record_save(built)
            budget.update(built.blocks())
            return context_call_record(
                session=session,
                source=source,
                fmt=fmt,
                parts=parts,
                tool_plan=tool_plan,
                prompt_plan=prompt_plan,
                budget=budget,
                record=built.record,
                build_ms=build_ms,
                stats=stats,
                request=request,
            )

    return body, record


def _commit_without_flush() -> None:
    """This transaction commits without waiting for the WAL flush when the
    operator chose so (PostgreSQL; ``DB_BUILD_RECORD_SYNC_COMMIT=false``). Still
    atomic and in order; only a database crash in the next fraction of a
    second can lose it."""
    if connection.vendor != "postgresql" or settings.DB_BUILD_RECORD_SYNC_COMMIT:
        return
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO OFF")
