"""Which session a client's call belongs to: the client's own session id, and its side requests.

**The client's id.** Some clients name their conversation in a header of
their own: Claude Code in ``x-claude-code-session-id``, opencode in
``x-session-id``. Without ``X-Contextsvc-Session`` that id names the session,
prefixed per client (``cc_<id>``, ``oc_<id>``: ``CLIENT_SESSION_HEADERS``),
so every call of one run lands in one session even when its first messages
change (it compacted itself).

**Side requests.** One client run also sends requests that are not its main
conversation: a title for the chat, a one-token quota probe, a sub-agent with
a prompt of its own. They carry the same session id (header or
``X-Contextsvc-Session`` from ``ANTHROPIC_CUSTOM_HEADERS``), but their
history is not a continuation of the main one; synced into the main session
they would look like a divergence and restart its live window. The rule: a
call whose system prompt differs from the one the session holds, a
one-token probe (``max_tokens`` 1), or a call without tools from a coding
agent whose conversation always offers them (``user_agents.TOOL_AGENTS``:
Gemini CLI's routing and compression questions, a title request; it may be
the run's very first call) is a side request. It goes to a session
of its own, ``<main id>~<hash of its system prompt and first message>``,
created on first use with the main session's window and linked to it
(``Session.parent``, shown in the dashboard). The main session's transcript
never sees it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction

from contextsvc.engine.providers.common import Converted
from contextsvc.engine.providers.fingerprint import conversation_key
from contextsvc.engine.user_agents import is_tool_agent
from contextsvc.errors import Conflict, NotFound
from sessions.models import Session
from sessions.selectors import session_get
from sessions.services.sessions import session_create

from ..providers import Dialect

# (header, session id prefix): the first of them the request carries names the session.
CLIENT_SESSION_HEADERS = (
    ("x-claude-code-session-id", "cc_"),  # Claude Code
    ("x-session-id", "oc_"),  # opencode (its session id, ses_...)
)
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")
SIDE_SEPARATOR = "~"
_SIDE_HASH = 16


def client_session_id(headers: Mapping[str, str]) -> str | None:
    """The session id the client itself names (Claude Code's, opencode's), or None."""
    for header, prefix in CLIENT_SESSION_HEADERS:
        value = (headers.get(header) or "").strip()
        if value:
            return f"{prefix}{value}" if _CLIENT_ID.match(value) else None
    return None


# Claude Code's first system block is a billing line whose hash changes from
# run to run: not part of what the conversation is.
_NOT_IDENTITY = ("x-anthropic-billing-header:",)


def _identity(sections: list[tuple[str, str]]) -> list[str]:
    return [content for _, content in sections if not content.startswith(_NOT_IDENTITY)]


def _sections(converted: Converted) -> list[str]:
    return _identity([(s.name, s.content) for s in converted.sections])


def _stored_sections(session: Session) -> list[str]:
    return _identity([(str(s.get("name")), str(s.get("content"))) for s in session.sections or ()])


def is_side_request(
    session: Session, body: dict[str, Any], converted: Converted, client: str = ""
) -> bool:
    """A call of the same client that is not ``session``'s conversation (module doc);
    ``client`` is the caller's label (``user_agents.client_label``)."""
    if session.parent_id is not None:
        return False  # already a side session: its own calls are its conversation
    if body.get("max_tokens") == 1:
        return True
    if is_tool_agent(client) and not converted.tools and not converted.other_tools:
        return True
    stored = _stored_sections(session)
    return bool(stored) and _sections(converted) != stored


def side_session_id(main: Session, owner_hash: str, body: dict[str, Any], dialect: Dialect) -> str:
    messages = dialect.client_messages(body)
    system = dialect.instructions(body, messages)
    key = conversation_key(agent=owner_hash, system=system, messages=messages)
    prefix = main.external_id[: 128 - _SIDE_HASH - len(SIDE_SEPARATOR)]
    return f"{prefix}{SIDE_SEPARATOR}{key[:_SIDE_HASH]}"


def session_for_side_request(
    *,
    main: Session,
    body: dict[str, Any],
    converted: Converted,
    dialect: Dialect,
    client: str = "",
    before_create: Callable[[], None] | None = None,
) -> Session:
    """``main`` itself, or the side session this call belongs to (created and linked on first use).

    ``before_create`` runs before a side session is created (``caller.session_for_call``).
    """
    if not is_side_request(main, body, converted, client):
        return main
    owner = main.owner
    sid = side_session_id(main, owner.key_hash, body, dialect)
    try:
        return session_get(owner=owner, external_id=sid)
    except NotFound:
        pass
    if before_create is not None:
        before_create()
    data: dict[str, Any] = {
        "id": sid,
        "model": str(body.get("model") or main.model),
        "provider": main.provider,
        "context_window": main.context_window,
        "buffer_tokens": main.buffer_tokens,
    }
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and 0 < max_tokens < main.context_window:
        data["max_output_tokens"] = max_tokens
    try:
        with transaction.atomic():
            side = session_create(
                owner=owner,
                data=data,  # type: ignore[arg-type]
                via="proxy",
                client=main.client,
            )
            Session.objects.filter(pk=side.pk).update(parent=main)
            side.parent_id = main.pk
            return side
    except Conflict:
        return session_get(owner=owner, external_id=sid)  # created by a concurrent call
