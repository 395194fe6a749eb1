"""One proxied call's database work: the caller, its session, the sync, the managed body, the reply.

Every function here is synchronous (the async views run them through
``sync_to_async``) and goes through the services the REST API uses: the
append, session create / sections / tools, the one context build and usage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction

from compaction.services.sync import compaction_overflow
from contextsvc import telemetry
from contextsvc.engine.providers import anthropic as anthropic_format
from contextsvc.engine.providers import openai_chat
from contextsvc.engine.providers.common import Converted, Reply, attach_meta
from contextsvc.engine.providers.fingerprint import message_fingerprint
from contextsvc.errors import NotFound
from prompting.context.build import context_preview
from prompting.context.service import context_for_call
from sessions.accounting import final_tool_name
from sessions.hotpath import read_session
from sessions.models import Session
from sessions.selectors import session_get
from sessions.services.append import session_append_messages
from sessions.services.inputs import MessageData, SectionData, ToolData
from sessions.services.sessions import session_set_sections, session_update
from sessions.services.tools import session_set_tools
from sessions.services.usage import session_record_usage

from ..providers import Dialect
from ..selectors import client_chains, client_view, match_view
from . import responses_body
from .builtins import (
    builtin_tool_data,
    client_tool_names,
    runnable_names,
    session_run_builtin_calls,
    split_calls,
    strip_anthropic,
    strip_openai,
)
from .caller import Caller, caller_and_session, caller_for, client_messages, session_id
from .client_fit import cap_breakpoints, session_follow_tool_search, window_shortfall
from .final import anthropic_as_text, final_tool_to_answer, message_as_text, openai_as_text
from .identity import session_for_side_request
from .sync import (
    Synced,
    ToTranscript,
    client_view_add_reply,
    plan_client_sync,
    session_sync_client_view,
)


class ContextTooLarge(Exception):
    """Even the final-turn context does not fit the window: the provider-shaped 400."""


@dataclass(slots=True)
class Prepared:
    """A call ready to forward: the session, the body to send and the guard's verdict."""

    session: Session
    body: dict[str, Any]
    guard: str
    synced: Synced
    runnable: frozenset[str] = frozenset()  # built-in tools the proxy runs (``services.builtins``)
    final_tool: str | None = (
        None  # the final-report tool the proxy turns into text (``services.final``)
    )


@dataclass(slots=True)
class Recorded:
    """A stored reply: whether to ask upstream again (only built-ins were called), what the client gets."""

    again: bool
    shown: dict[str, Any] | None


def _to_transcript(dialect: Dialect, lead: int) -> ToTranscript:
    """The converter ``session_sync_client_view`` applies to a slice of the client's messages."""

    def convert(messages: list[dict[str, Any]], offset: int) -> list[dict[str, Any]]:
        if dialect.name == "anthropic":
            return anthropic_format.messages_to_transcript(messages, offset=offset)
        if dialect.name == "responses":
            return responses_body.units_to_transcript(messages, offset)
        return openai_chat.messages_to_transcript(messages, offset=lead + offset)

    return convert


def prepare(
    *,
    dialect: Dialect,
    headers: Mapping[str, str],
    body: dict[str, Any],
    converted: Converted,
) -> tuple[Caller, Prepared]:
    """Everything before forwarding, in one trip to a thread: caller, session, sync, build.

    ``converted`` is the request without its messages (``Dialect.envelope``):
    the sync converts those its session does not hold. A session is created
    only for a history that converts whole (a refused call creates nothing).
    """
    messages = client_messages(dialect, body)
    to_transcript = _to_transcript(dialect, _lead(body, messages))

    def validate() -> None:
        to_transcript(list(messages), 0)

    caller, session = caller_and_session(
        dialect=dialect, headers=headers, body=body, before_create=validate
    )
    session = session_for_side_request(
        main=session, body=body, converted=converted, before_create=validate
    )
    return caller, prepare_call(
        session=session, dialect=dialect, body=body, converted=converted, messages=messages
    )


def _lead(body: dict[str, Any], messages: list[dict[str, Any]]) -> int:
    """How many leading messages are Chat Completions' system ones (sections, not history)."""
    return len(body.get("messages") or ()) - len(messages)


def count_body(
    *, dialect: Dialect, headers: Mapping[str, str], body: dict[str, Any], converted: Converted
) -> tuple[Caller, dict[str, Any]]:
    """The body the proxy would send for ``body``, computed without writing anything.

    The managed context as it stands (``context_preview``: a read) with the
    client's messages the session does not hold yet after it; with no session
    yet, or a client whose history diverged, the client's own body.
    """
    caller = caller_for(dialect, headers)
    sid = session_id(caller.key.key_hash, headers, body, dialect)
    try:
        session = session_get(owner=caller.key, external_id=sid)
    except NotFound:
        return caller, body
    messages = client_messages(dialect, body)
    view = client_view(session.pk)
    match = match_view(view, client_chains(view, messages), messages)
    prefix = match.prefix
    if prefix < match.stored:
        return caller, body
    built = context_preview(session, dialect.fmt)
    final = built.pop("budget")["guard"]["status"] == "final"
    out = upstream_body(dialect, converted, built, final=final)
    out["messages"] = [*out["messages"], *messages[prefix:]]
    return caller, out


def _sections(converted: Converted) -> list[SectionData]:
    return [
        {"name": s.name, "content": s.content, "cacheable": s.cacheable} for s in converted.sections
    ]


def _tools(converted: Converted) -> list[ToolData]:
    return [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": t.input_schema,
            "category": "mcp",
        }
        for t in converted.tools
    ]


def prepare_call(
    *,
    session: Session,
    dialect: Dialect,
    body: dict[str, Any],
    converted: Converted,
    messages: list[dict[str, Any]],
) -> Prepared:
    """Sync the transcript, the sections and the tools; build the managed body (guard applied).

    ``session`` may come without its tools (``caller_and_session``): they are
    compared on the one full read after the sync, which the build needs anyway.
    ``messages``: the client's conversation (``client_messages``).
    """
    shortfall = window_shortfall(session, body, converted)
    if shortfall is not None:  # before any write: a refused call changes nothing
        raise ContextTooLarge(shortfall)
    to_transcript = _to_transcript(dialect, _lead(body, messages))
    # Before any write too: converting what is new validates it (a ConversionError).
    plan = plan_client_sync(
        view=client_view(session.pk), messages=messages, to_transcript=to_transcript
    )
    session = session_follow_tool_search(session=session, converted=converted)
    runnable = runnable_names(session, converted)
    sections = _sections(converted)
    if sections != (session.sections or []):
        session = session_set_sections(session=session, sections=sections)
    session = _follow_max_tokens(session, body)
    synced = session_sync_client_view(
        session=session, messages=messages, to_transcript=to_transcript, plan=plan
    )
    session = read_session(session.pk)
    tools = [*_tools(converted), *builtin_tool_data(runnable)]
    if tools != (session.tools or []):
        session = session_set_tools(session=session, tools=tools)
    return _build(session, dialect, converted, synced, runnable)


def _follow_max_tokens(session: Session, body: dict[str, Any]) -> Session:
    """A request's ``max_tokens`` (``max_completion_tokens``) becomes the session's, for the guard."""
    wanted = body.get("max_tokens") or body.get("max_completion_tokens")
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted <= 0:
        return session
    if wanted == session.max_output_tokens:
        return session
    return session_update(session=session, data={"max_output_tokens": wanted})


def _build(
    session: Session,
    dialect: Dialect,
    converted: Converted,
    synced: Synced,
    runnable: frozenset[str],
) -> Prepared:
    built = context_for_call(session=session, fmt=dialect.fmt, source="proxy")
    budget = built.pop("budget")
    guard = budget["guard"]["status"]
    if guard == "final" and budget["estimated_tokens"] > budget["context_window"]:
        raise ContextTooLarge(
            f"prompt is too long: the managed context needs about {budget['estimated_tokens']} "
            f"tokens > {budget['context_window']} maximum, even after compaction"
        )
    body = upstream_body(dialect, converted, built, final=guard == "final")
    final_tool = final_tool_to_answer(
        body.get("tools") or (), final_tool_name(session), client_tool_names(converted)
    )
    return Prepared(
        session=session,
        body=body,
        guard=guard,
        synced=synced,
        runnable=runnable,
        final_tool=final_tool,
    )


def rebuild(*, prepared: Prepared, dialect: Dialect, converted: Converted) -> Prepared:
    """The next body after the proxy answered built-in calls itself."""
    session = read_session(prepared.session.pk)
    return _build(session, dialect, converted, prepared.synced, prepared.runnable)


def rebuild_after_overflow(
    *, prepared: Prepared, dialect: Dialect, converted: Converted, error: dict[str, Any]
) -> Prepared:
    """spec 003 reactive path: upstream said too long; compact now and build again.

    When upstream names its window and it is smaller than the session's, the
    session takes it first (the model served there is not the profile's), so the
    compaction aims inside the window that is really there.
    """
    session = prepared.session
    window = dialect.reported_window(error)
    if window is not None and window < session.context_window:
        session = session_update(session=session, data={"context_window": window})
    compaction_overflow(session=session, detail=json.dumps(error)[:500])
    session = read_session(prepared.session.pk)
    return _build(session, dialect, converted, prepared.synced, prepared.runnable)


def upstream_body(
    dialect: Dialect, converted: Converted, built: dict[str, Any], *, final: bool
) -> dict[str, Any]:
    """The client's fields with system, messages and tools replaced by the managed context.

    On a final turn the tools are the final-report tool alone (spec 001
    enforcement), so the client's ``tool_choice`` is dropped with its tools.
    """
    if dialect.name == "responses":
        return responses_body.upstream_body(converted, built, final=final)
    body = dict(converted.rest)
    if dialect.name == "anthropic" and built.get("system"):
        body["system"] = built["system"]
    body["messages"] = built["messages"]
    tools = list(built.get("tools") or ())
    for tool in tools:
        extra = converted.tool_extras.get(_tool_name(tool))
        if extra and dialect.name == "anthropic":
            tool.update(extra)
        elif extra:
            tool["function"].update(extra.get("function", {}))
            tool.update(extra.get("tool", {}))
    if final:
        body.pop("tool_choice", None)
    else:
        tools.extend(converted.other_tools)
    if tools:
        body["tools"] = tools
    else:
        body.pop("tool_choice", None)
    return cap_breakpoints(body) if dialect.name == "anthropic" else body


def _tool_name(tool: dict[str, Any]) -> str:
    return tool.get("name") or (tool.get("function") or {}).get("name", "")


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
    """
    if final_tool:
        reply = replace(reply, message=message_as_text(reply.message, final_tool))
        if response is not None:
            as_text = anthropic_as_text if dialect.name == "anthropic" else openai_as_text
            response = as_text(response, final_tool)
    message: dict[str, Any] = dict(reply.message)
    if reply.incomplete:
        message["content"] = attach_meta(message.get("content") or "", {"incomplete": True})
    _trace_call(session, dialect, reply, started_ns)
    ours, theirs = split_calls(message.get("tool_calls") or (), runnable)
    if reply.incomplete:
        ours = []
    has_content = message.get("tool_calls") or _has_text(message.get("content"))
    again = bool(ours) and not theirs and not last_round
    shown = response
    with transaction.atomic():
        if has_content:
            batch: list[MessageData] = [message]  # type: ignore[list-item]
            session_append_messages(session=session, messages=batch)
        usage = reply.usage.to_dict()
        if any(usage.values()):
            session_record_usage(session=session, usage=usage)  # type: ignore[arg-type]
        if ours:
            session_run_builtin_calls(session=session, calls=ours)
        if has_content and not reply.incomplete and not again:
            hidden = {c["name"] for c in ours}
            if hidden and response is not None:
                strip = {"anthropic": strip_anthropic, "responses": responses_body.strip_calls}.get(
                    dialect.name, strip_openai
                )
                shown = strip(response, hidden)
            seen = Reply(
                message={**reply.message, "tool_calls": theirs} if theirs else _no_calls(reply),
                usage=reply.usage,
            )
            echoed = dialect.client_message(seen, shown)
            client_view_add_reply(
                session=session, fingerprint=message_fingerprint(echoed), synced=synced
            )
    return Recorded(again=again, shown=shown)


def _trace_call(session: Session, dialect: Dialect, reply: Reply, started_ns: int | None) -> None:
    """The upstream call as a GenAI client span (``contextsvc.telemetry``), from its start."""
    if not telemetry.enabled():
        return
    attributes: dict[str, Any] = {
        **telemetry.session_attributes(session, "chat"),
        telemetry.PROVIDER: "anthropic" if dialect.name == "anthropic" else "openai",
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
