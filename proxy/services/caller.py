"""Who calls the proxy and in which session: the agent key, its rate limits, the session.

The common call names a session that exists: the key check and the session
read are one query (``sessions.hotpath.session_for_key``, as the REST API's
auth does). Otherwise the key alone is looked up (a bad key stays a 401) and
the session is created on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contextsvc.engine import user_agents
from contextsvc.engine.providers.fingerprint import conversation_key
from contextsvc.errors import Conflict, NotFound, ServiceError, Unauthorized, ValidationFailed
from contextsvc.ratelimit import count_key
from sessions.hotpath import session_for_key
from sessions.models import AgentKey, Session, hash_key
from sessions.selectors import is_session_id, session_get
from sessions.services.delete import session_delete
from sessions.services.sessions import session_create

from ..providers import Dialect
from .identity import client_session_id

SESSION_HEADER = "x-contextsvc-session"
KEY_HEADER = "x-contextsvc-key"


@dataclass(slots=True)
class Caller:
    """Who calls and with which upstream key (never stored, never logged)."""

    key: AgentKey
    upstream_key: str | None


class NoUpstreamKey(ServiceError):
    """Managed credentials on a server without the provider's key: a 403, never a forward.

    Forwarded without a key, the call would come back as upstream's 401, which
    Claude Code retries (it re-reads its key on a 401) and a 5xx every SDK
    retries: a 403 is retried by neither, and the message names the fix.
    """

    code, status = "NO_UPSTREAM_KEY", 403


def _credentials(dialect: Dialect, headers: Mapping[str, str]) -> tuple[str, str | None]:
    """The agent key (``X-Contextsvc-Key``, or the provider key itself when managed) and
    upstream's: the client's own provider key, else the server's (None: neither)."""
    provider_key = dialect.provider_key(headers)
    agent_key = headers.get(KEY_HEADER)
    if agent_key:
        upstream = provider_key or dialect.managed_key()
    else:
        agent_key, upstream = provider_key, dialect.managed_key()
    if not agent_key:
        raise Unauthorized("Send your contextsvc agent key in X-Contextsvc-Key (or as the API key)")
    return agent_key, upstream


def _no_upstream_key(dialect: Dialect) -> str:
    """What a managed-credentials call on a server without the provider's key is told."""
    vendor = dialect.vendor
    setting = dialect.managed_key_setting()
    return (
        f"contextsvc proxy: managed credentials are on for this agent key (it sent no {vendor} "
        f"key of its own) but the server has no {setting} (or {setting}_FILE): set it on the "
        f"server, or send your own {vendor} key as the API key with your contextsvc agent key "
        "in X-Contextsvc-Key (pass-through credentials)."
    )


def _check_upstream(dialect: Dialect, upstream: str | None) -> None:
    """Checked once the agent key is known (an unknown key stays a 401), before anything
    is counted or written."""
    if not upstream:
        raise NoUpstreamKey(_no_upstream_key(dialect))


def _active_key(digest: str) -> AgentKey:
    key = AgentKey.objects.filter(key_hash=digest, revoked_at__isnull=True).first()
    if key is None:
        raise Unauthorized("Unknown or revoked contextsvc agent key")
    return key


def caller_for(dialect: Dialect, headers: Mapping[str, str], *, upstream: bool = True) -> Caller:
    """The calling key, counted against its rate limits (``RateLimited`` over them).

    ``upstream``: the call goes upstream, so it needs a provider key
    (``NoUpstreamKey`` without); the proxy's own store does not.
    """
    agent_key, upstream_key = _credentials(dialect, headers)
    key = _active_key(hash_key(agent_key))
    if upstream:
        _check_upstream(dialect, upstream_key)
    # The hash prefix names the key in the limiter, as on the REST API (one budget).
    count_key(key.key_hash[:16])
    return Caller(key=key, upstream_key=upstream_key)


def session_id(
    key_hash: str, headers: Mapping[str, str], body: dict[str, Any], dialect: Dialect
) -> str:
    """The session the call names, or the one derived from its conversation."""
    sid = headers.get(SESSION_HEADER) or client_session_id(headers)
    if not sid:
        messages = dialect.client_messages(body)
        system = dialect.instructions(body, messages)
        sid = "px_" + conversation_key(agent=key_hash, system=system, messages=messages)
    if not is_session_id(sid):
        raise ValidationFailed("X-Contextsvc-Session is not a valid session id")
    return sid


def session_for_call(
    *,
    key: AgentKey,
    headers: Mapping[str, str],
    body: dict[str, Any],
    dialect: Dialect,
    before_create: Callable[[], None] | None = None,
) -> Session:
    """The named session (created on first use), or the one derived from the conversation.

    ``before_create`` runs before a session is created (the check of the
    client's history: a refused first call creates nothing).
    """
    sid = session_id(key.key_hash, headers, body, dialect)
    try:
        return session_get(owner=key, external_id=sid)
    except NotFound:
        pass
    if before_create is not None:
        before_create()
    data: dict[str, Any] = {"model": str(body.get("model") or ""), "id": sid}
    if not data["model"]:
        raise ValidationFailed("model: Field required")
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    if isinstance(max_tokens, int) and max_tokens > 0:
        data["max_output_tokens"] = max_tokens
    data["provider"] = dialect.provider
    try:
        session = session_create(
            owner=key,
            data=data,  # type: ignore[arg-type]
            via="proxy",
            client=request_client(headers),
        )
    except Conflict:
        return session_get(owner=key, external_id=sid)  # created by a concurrent first call
    session.created_by_call = True  # type: ignore[attr-defined]
    return session


def request_client(headers: Mapping[str, str]) -> str:
    """The label of the client that sent ``headers`` (its user agent; Codex's originator)."""
    return user_agents.client_label(headers.get("user-agent"), headers.get("originator"))


def discard_if_new(session: Session) -> None:
    """Delete ``session`` if this call created it: a first call refused after the session
    was made (a tool result with no call, a schema the tools service refuses) leaves nothing."""
    if getattr(session, "created_by_call", False):
        session_delete(session=session)


def caller_and_session(
    *,
    dialect: Dialect,
    headers: Mapping[str, str],
    body: dict[str, Any],
    before_create: Callable[[], None] | None = None,
) -> tuple[Caller, Session]:
    """The caller (counted against its limits) and its session, in one query when it exists.

    The session comes without its ``tools`` (``hotpath.HEAVY_FIELDS``);
    ``before_create``: as ``session_for_call``.
    """
    agent_key, upstream = _credentials(dialect, headers)
    digest = hash_key(agent_key)
    session = session_for_key(session_id(digest, headers, body, dialect), digest)
    if session is None:
        key = _active_key(digest)
        _check_upstream(dialect, upstream)
        count_key(digest[:16])
        return Caller(key=key, upstream_key=upstream), session_for_call(
            key=key, headers=headers, body=body, dialect=dialect, before_create=before_create
        )
    _check_upstream(dialect, upstream)
    count_key(digest[:16])
    return Caller(key=session.owner, upstream_key=upstream), session
