"""A proxied call's reply stored: the assistant message, its usage, its built-in calls, its span.

Split from ``services.calls`` (the part before forwarding): recording runs
after upstream answered, and carries the telemetry span of that call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction

from contextsvc import telemetry
from contextsvc.engine.providers.common import Reply, attach_meta
from contextsvc.engine.providers.fingerprint import message_fingerprint
from sessions.models import Session
from sessions.services.append import session_append_messages
from sessions.services.inputs import MessageData
from sessions.services.usage import session_record_usage

from ..providers import Dialect
from ..providers.report import with_text
from .builtins import (
    limit_note,
    max_rounds,
    session_run_builtin_calls,
    split_calls,
)
from .final import message_as_text
from .sync import Synced, client_view_add_reply


@dataclass(slots=True)
class Recorded:
    """A stored reply: whether to ask upstream again (only built-ins were called), what the client gets."""

    again: bool
    shown: dict[str, Any] | None
    # The round limit stopped the loop on built-in calls: what the answer says of it
    # (``builtins.limit_note``), already in ``shown`` and the stored message.
    note: str | None = None


def session_record_reply(
    *,
    session: Session,
    dialect: Dialect,
    reply: Reply,
    response: dict[str, Any] | None,
    runnable: frozenset[str] = frozenset(),
    last_round: bool = False,
    final_tool: str | None = None,
    started_ns: int | None = None,
    synced: Synced | None = None,
) -> Recorded:
    """Append the assistant's answer (marked if incomplete) and its usage; run its built-in calls.

    The client's view gets the answer as the client receives it: without the
    built-in calls (``services.builtins``), its final-report call as text (``services.final``).
    On the last round (``last_round``) an answer of built-in calls only ends the
    loop: it is stored and shown with a note saying so, never empty.
    """
    if final_tool:
        reply = replace(reply, message=message_as_text(reply.message, final_tool))
        if response is not None:
            response = dialect.final_as_text(response, final_tool)
    ours, theirs = split_calls(reply.message.get("tool_calls") or (), runnable)
    if reply.incomplete:
        ours = []
    note = None
    if ours and not theirs and last_round:
        note = limit_note(max_rounds(session), ours)
        content = with_text(dialect.noted_content(reply.message.get("content")), note)
        reply = replace(reply, message={**reply.message, "content": content})
    message: dict[str, Any] = dict(reply.message)
    if reply.incomplete:
        message["content"] = attach_meta(message.get("content") or "", {"incomplete": True})
    _trace_call(session, dialect, reply, started_ns)
    has_content = message.get("tool_calls") or _has_text(message.get("content"))
    again = bool(ours) and not theirs and not last_round
    shown = response
    usage = reply.usage.to_dict()
    reported = any(usage.values())
    with transaction.atomic():
        if has_content:
            batch: list[MessageData] = [message]  # type: ignore[list-item]
            # The usage report below runs the after-append checks (compaction's
            # auto-trigger) on the newer state: once per call, not twice.
            session_append_messages(
                session=session, messages=batch, notify=not reported, savepoint=False
            )
        if reported:
            session_record_usage(session=session, usage=usage, savepoint=False)  # type: ignore[arg-type]
        if ours:
            session_run_builtin_calls(session=session, calls=ours)
        if has_content and not reply.incomplete and not again:
            hidden = {c["name"] for c in ours}
            if hidden and response is not None:
                shown = dialect.strip_calls(response, hidden)
            if note and shown is not None:
                shown = dialect.with_note(shown, note)
            seen = Reply(
                message={**reply.message, "tool_calls": theirs} if theirs else _no_calls(reply),
                usage=reply.usage,
            )
            echoed = dialect.client_message(seen, shown)
            client_view_add_reply(
                session=session, fingerprint=message_fingerprint(echoed), synced=synced
            )
    return Recorded(again=again, shown=shown, note=note)


def _trace_call(session: Session, dialect: Dialect, reply: Reply, started_ns: int | None) -> None:
    """The upstream call as a GenAI client span (``contextsvc.telemetry``), from its start."""
    if not telemetry.enabled():
        return
    attributes: dict[str, Any] = {
        **telemetry.session_attributes(session, "chat"),
        telemetry.PROVIDER: dialect.provider,
        telemetry.RESPONSE_MODEL: reply.model,
        telemetry.RESPONSE_ID: reply.id,
        "gen_ai.response.finish_reasons": [reply.stop_reason] if reply.stop_reason else None,
        "contextsvc.proxy.api": dialect.name,
        "contextsvc.incomplete": reply.incomplete,
        **telemetry.usage_attributes(reply.usage.to_dict()),
    }
    error = (reply.error or {}).get("message") if reply.error else None
    telemetry.record_span(
        f"chat {session.model}", attributes, start_ns=started_ns, error=error or None
    )


def _no_calls(reply: Reply) -> dict[str, Any]:
    return {k: v for k, v in reply.message.items() if k != "tool_calls"}


def _has_text(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    return any(
        part.get("type") != "text" or str(part.get("text") or "").strip()
        for part in content or ()
        if isinstance(part, dict)
    )
