"""One proxied call's database work: the caller, its session, the sync, the managed body, the reply.

Every function here is synchronous (the async views run them through
``sync_to_async``) and goes through the services the REST API uses: the
append, session create / sections / tools, the one context build and usage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compaction.services.sync import compaction_overflow
from contextsvc.body_gate import BodyRefused
from contextsvc.engine.budget import output_in_window
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.providers.common import ConversionError, Converted
from contextsvc.errors import NotFound, ServiceError
from prompting.context.build import context_preview
from prompting.context.service import context_for_call_deferred
from sessions.accounting import final_tool_name
from sessions.hotpath import read_session
from sessions.models import Session
from sessions.selectors import session_get
from sessions.services.inputs import SectionData, ToolData
from sessions.services.sessions import session_set_sections, session_update
from sessions.services.tools import session_set_tools

from ..providers import Dialect
from ..selectors import client_view
from .account import ClientSide, call_account, client_side
from .builtins import (
    builtin_tool_data,
    client_tool_names,
    runnable_names,
)
from .caller import (
    Caller,
    caller_and_session,
    caller_for,
    discard_if_new,
    request_client,
    session_id,
)
from .client_fit import session_follow_tool_search, window_shortfall
from .final import final_tool_to_answer
from .identity import session_for_side_request
from .sync import (
    Synced,
    matched,
    plan_client_sync,
    session_sync_client_view,
)


class ContextTooLarge(Exception):
    """Even the final-turn context does not fit the window: the provider-shaped 400."""


# What a call is refused with (each a provider-shaped 4xx): a session the call
# created is deleted again (``discard_if_new``).
REFUSALS = (ServiceError, ConversionError, EngineValidationError, ContextTooLarge, BodyRefused)


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
    # Writes the build's record (``context_for_call_deferred``): the relay runs
    # it once upstream has answered (``record_build``), before the reply is stored.
    record: Callable[[], int | None] | None = None
    client: ClientSide | None = None  # the client's request, for the record's account


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
    messages = dialect.client_messages(body)
    to_transcript = dialect.to_transcript(body, messages)

    def validate() -> None:
        to_transcript(list(messages), 0)

    caller, session = caller_and_session(
        dialect=dialect, headers=headers, body=body, before_create=validate
    )
    try:
        side = session_for_side_request(
            main=session,
            body=body,
            converted=converted,
            dialect=dialect,
            client=request_client(headers),
            before_create=validate,
        )
        return caller, prepare_call(
            session=side, dialect=dialect, body=body, converted=converted, messages=messages
        )
    except REFUSALS:
        discard_if_new(session)
        raise


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
    messages = dialect.client_messages(body)
    view = client_view(session.pk)
    _, match = matched(
        view, messages, dialect.to_transcript(body, messages, session.open_tool_calls)
    )
    prefix = match.prefix
    if prefix < match.stored:
        return caller, body
    built = context_preview(session, dialect.fmt)
    final = built.pop("budget")["guard"]["status"] == "final"
    out = dialect.upstream_body(converted, built, final=final)
    out["messages"] = [*out["messages"], *messages[prefix:]]
    return caller, out


def _sections(converted: Converted) -> list[SectionData]:
    return [
        {"name": s.name, "content": s.content, "cacheable": s.cacheable} for s in converted.sections
    ]


def _tools(converted: Converted) -> list[ToolData]:
    """The client's tools, each with its converter's category: ``mcp`` or ``client``."""
    return [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": t.input_schema,
            "category": t.category,
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
    shortfall = window_shortfall(session, body, converted, dialect.output_limit_hint)
    if shortfall is not None:  # before any write: a refused call changes nothing
        raise ContextTooLarge(shortfall)
    to_transcript = dialect.to_transcript(body, messages, session.open_tool_calls)
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
    client = client_side(
        body=body,
        messages=len(messages),
        synced=synced,
        session=session,
        same=plan.match.prefix,
    )
    return _build(session, dialect, converted, synced, runnable, client)


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
    client: ClientSide | None,
) -> Prepared:
    built, record = context_for_call_deferred(session=session, fmt=dialect.fmt, source="proxy")
    budget = built.pop("budget")
    guard = budget["guard"]["status"]
    if guard == "final" and budget["estimated_tokens"] > budget["context_window"]:
        record()  # refused, but built: recorded as every build is
        raise ContextTooLarge(
            f"prompt is too long: the managed context needs about {budget['estimated_tokens']} "
            f"tokens > {budget['context_window']} maximum, even after compaction"
        )
    body = dialect.upstream_body(converted, built, final=guard == "final")
    final_tool = final_tool_to_answer(
        body.get("tools") or (), final_tool_name(session), client_tool_names(converted)
    )

    def record_with_account() -> int | None:
        if client is None:
            return record()
        return record(request=call_account(client, converted, body, final=guard == "final"))

    return Prepared(
        session=session,
        body=body,
        guard=guard,
        synced=synced,
        runnable=runnable,
        final_tool=final_tool,
        record=record_with_account,
        client=client,
    )


def rebuild(*, prepared: Prepared, dialect: Dialect, converted: Converted) -> Prepared:
    """The next body after the proxy answered built-in calls itself."""
    session = read_session(prepared.session.pk)
    return _build(session, dialect, converted, prepared.synced, prepared.runnable, prepared.client)


def rebuild_after_overflow(
    *, prepared: Prepared, dialect: Dialect, converted: Converted, error: dict[str, Any]
) -> Prepared:
    """docs/concepts/compaction.md#overflow: upstream said too long; compact now and build again.

    When upstream names its window and it is smaller than the session's, the
    session takes it first (the model served there is not the profile's), so the
    compaction aims inside the window that is really there; an output limit that
    would leave no room in it takes a quarter of it.
    """
    session = prepared.session
    previous = session.context_window
    window = dialect.reported_window(error)
    if window is not None and window < session.context_window:
        output = output_in_window(session.max_output_tokens, session.buffer_tokens, window)
        session = session_update(
            session=session, data={"context_window": window, "max_output_tokens": output}
        )
    compaction_overflow(
        session=session,
        detail=json.dumps(error)[:500],
        reported_tokens=dialect.reported_size(error),
        source="proxy",
        limit=window,
        previous_context_window=previous,
    )
    session = read_session(prepared.session.pk)
    return _build(session, dialect, converted, prepared.synced, prepared.runnable, prepared.client)
