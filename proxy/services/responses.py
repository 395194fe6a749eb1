"""One Responses API call's database work: its session (by header, by ``previous_response_id``), the sync, the build.

The Responses route reuses the proxy's pieces (``services.calls``: the
caller, the session, the sections and tools, the one context build), with
two differences of its own:

- **session identity**: ``X-Contextsvc-Session``, else the client's own
  conversation headers (Codex sends ``session-id`` / ``thread-id``), else the
  per-conversation hash; a ``previous_response_id`` names its session itself;
- **continuation**: with ``previous_response_id`` the client sends only what
  is new; the stored response must be the head of its conversation (the
  proxy keeps one live window per session, it does not fork one), and the new
  units are appended after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from contextsvc.engine.providers.common import Converted
from contextsvc.engine.providers.fingerprint import chain_next, fingerprints
from contextsvc.errors import ValidationFailed
from sessions.hotpath import read_session
from sessions.models import Session
from sessions.services.sessions import session_set_sections
from sessions.services.tools import session_set_tools

from ..models import ClientView, ClientViewEntry
from ..providers import Dialect
from ..providers.responses_body import client_units, units_to_transcript
from ..selectors import client_view
from .account import client_side
from .builtins import builtin_tool_data, runnable_names
from .caller import SESSION_HEADER, Caller, caller_and_session, caller_for, discard_if_new
from .calls import REFUSALS, Prepared, _build, _follow_max_tokens, _sections, _tools
from .store import is_head, stored_response_get
from .sync import Synced, _append, _rename, plan_client_sync, session_sync_client_view

# The client's own names for its conversation, in the order they are taken.
CONVERSATION_HEADERS = ("session-id", "thread-id")


def _identity(headers: Mapping[str, str]) -> Mapping[str, str]:
    """The headers with the client's conversation id as ``X-Contextsvc-Session`` when none is set."""
    if headers.get(SESSION_HEADER):
        return headers
    for name in CONVERSATION_HEADERS:
        value = headers.get(name)
        if value:
            return {**{k.lower(): v for k, v in headers.items()}, SESSION_HEADER: value}
    return headers


def session_sync_responses(
    *,
    dialect: Dialect,
    headers: Mapping[str, str],
    body: dict[str, Any],
    converted: Converted,
    units: list[dict[str, Any]] | None = None,
) -> tuple[Caller, Session, Synced]:
    """Caller (counted against its rate limits), session and sync, without the build.
    ``units``: the body's (``client_units``), when the caller has them already."""
    previous = body.get("previous_response_id")
    units = client_units(body) if units is None else units
    if previous is not None:
        caller = caller_for(dialect, headers)
        if not isinstance(previous, str) or not previous:
            raise ValidationFailed("previous_response_id: expected a response id")
        record = stored_response_get(owner=caller.key, response_id=previous)
        if not is_head(record):
            raise ValidationFailed(
                f"previous_response_id '{previous}' is not the latest response of its "
                "conversation: contextsvc continues a conversation from its latest response only"
            )
        units_to_transcript(units, 0)  # what is new, checked before any write
        session = _with_prompt(record.session, converted)
        synced = session_continue_client_view(session=session, units=units)
    else:
        # The common call: key and session in one query (the session without its tools).
        caller, session = caller_and_session(
            dialect=dialect,
            headers=_identity(headers),
            body=body,
            before_create=lambda: units_to_transcript(units, 0),
        )
        try:
            synced = _sync(session, converted, units)
        except REFUSALS:
            discard_if_new(session)
            raise
    session = read_session(session.pk)  # the one full read the build needs
    return caller, _with_tools(session, converted), synced


def _sync(session: Session, converted: Converted, units: list[dict[str, Any]]) -> Synced:
    summary = session.summary

    def to_transcript(part: list[dict[str, Any]], offset: int) -> list[dict[str, Any]]:
        return units_to_transcript(part, offset, summary)

    # Planned before the first write: converting what is new validates it.
    plan = plan_client_sync(
        view=client_view(session.pk), messages=units, to_transcript=to_transcript
    )
    session = _with_prompt(session, converted, tools=False)
    return session_sync_client_view(
        session=session, messages=units, to_transcript=to_transcript, plan=plan
    )


def prepare_responses(
    *,
    dialect: Dialect,
    headers: Mapping[str, str],
    body: dict[str, Any],
    converted: Converted,
) -> tuple[Caller, Prepared]:
    """Caller, session, sync and build for ``POST /responses``."""
    units = client_units(body)  # grouped once: the sync's and the account's
    caller, session, synced = session_sync_responses(
        dialect=dialect, headers=headers, body=body, converted=converted, units=units
    )
    client = client_side(body=body, messages=len(units), synced=synced, session=session)
    runnable = runnable_names(session, converted)
    return caller, _build(session, dialect, converted, synced, runnable, client)


def _with_prompt(session: Session, converted: Converted, *, tools: bool = True) -> Session:
    """The session with this call's sections, max output and (``tools``) tools."""
    sections = _sections(converted)
    if sections != (session.sections or []):
        session = session_set_sections(session=session, sections=sections)
    if tools:
        session = _with_tools(session, converted)
    # The Responses API's name for it; the guard keeps room for what the client asks.
    return _follow_max_tokens(session, {"max_tokens": converted.rest.get("max_output_tokens")})


def _with_tools(session: Session, converted: Converted) -> Session:
    """The client's tools plus the built-ins the proxy runs (compared on a full read)."""
    runnable = runnable_names(session, converted)
    tools = [*_tools(converted), *builtin_tool_data(runnable)]
    if tools != (session.tools or []):
        session = session_set_tools(session=session, tools=tools)
    return session


def session_continue_client_view(*, session: Session, units: list[dict[str, Any]]) -> Synced:
    """Append the units a ``previous_response_id`` call adds after the view it continues.

    The view's chain goes on from the reply: the client never echoes it, so
    the reply's entry is written here (a later divergence reads the entries).
    """
    with transaction.atomic():
        view, _ = ClientView.objects.select_for_update().get_or_create(session=session)
        new = units_to_transcript(units, view.count, session.summary)
        new = _rename(new, dict(view.renamed or {}))
        if new:
            _append(session, new)
        entries = []
        if view.reply_at is not None:
            entries.append(ClientViewEntry(view=view, index=view.reply_at, chain=view.chain))
        chain = view.chain
        for k, fingerprint in enumerate(fingerprints(units)):
            chain = chain_next(chain, fingerprint)
            entries.append(ClientViewEntry(view=view, index=view.count + k, chain=chain))
        if entries:
            ClientViewEntry.objects.bulk_create(
                entries,
                update_conflicts=True,
                unique_fields=["view", "index"],
                update_fields=["chain"],
            )
        view.count += len(units)
        view.chain = chain
        view.reply_at = None
        view.reply_chain = ""
        view.save()
    return Synced(appended=len(new), diverged=False)
