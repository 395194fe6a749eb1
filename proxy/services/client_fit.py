"""Living with what a coding agent already does: its own tool search, its cache markers, its window.

**Tool search.** Claude Code defers most of its tools itself: a
``ToolSearch`` tool and tools marked ``defer_loading``. Deferring them again
(docs/concepts/deferral.md#tool-search) would hide the client's search tool or the tools it loads,
so a session whose client does its own tool search gets no deferral from us
(``policy.proxy.client_tool_search``, set once when such a request is seen):
its tools travel as sent, ``defer_loading`` and all.

**Cache breakpoints.** The API's limit of 4 markers per request is kept by
``providers.anthropic_cache.cap_breakpoints``.

**``context_management``.** The client's edits (Claude Code sends
``clear_thinking_20251015``; ``clear_tool_uses_…`` works the same way) pass
through with every other field and run upstream on the context we built:
ours first (trimmed and offloaded outputs, compaction, the live window), then
the API applies the client's edits to what we send. They never change the
transcript, and the usage the API reports (what we record) is after both.
Thinking blocks are sent as stored, so a ``keep`` rule sees the turns we kept.

**Fit.** A window that cannot hold even the system prompt, the tools and the
request's ``max_tokens`` (plus the buffer) can never take a call, whatever
compaction does. ``window_shortfall`` names the numbers and the fixes, for a
provider-shaped 400 that the client shows as its error; it runs before the
call writes anything, so the session stays as it was.
"""

from __future__ import annotations

from typing import Any

from contextsvc.engine import deferral
from contextsvc.engine.providers.common import Converted
from contextsvc.engine.tokens import compact_json
from prompting.services.policy import client_tool_search, deferral_inputs
from prompting.services.sections import count_text
from sessions import accounting
from sessions.models import Session
from sessions.services.sessions import session_update

# Names of client tool-search tools (Claude Code's; the API's server tools are typed).
CLIENT_SEARCH_TOOLS = frozenset({"ToolSearch"})


def does_tool_search(converted: Converted) -> bool:
    """The request defers tools itself (``defer_loading``) or carries a tool-search tool."""
    if any(t.name in CLIENT_SEARCH_TOOLS for t in converted.tools):
        return True
    if any(extra.get("defer_loading") for extra in converted.tool_extras.values()):
        return True
    return any(
        t.get("defer_loading") or str(t.get("type", "")).startswith("tool_search_tool")
        for t in converted.other_tools
    )


def session_follow_tool_search(*, session: Session, converted: Converted) -> Session:
    """Turn the session's deferral off once its client shows it searches its tools itself."""
    if client_tool_search(session) or not does_tool_search(converted):
        return session
    proxy = dict((session.policy or {}).get("proxy") or {})
    proxy["client_tool_search"] = True
    return session_update(session=session, data={"policy": {"proxy": proxy}})


def _tool_tokens(session: Session, converted: Converted) -> int:
    tokenizer, scale, limit, _ = deferral_inputs(session)
    raw = sum(
        count_text("\n".join((t.name, t.description, compact_json(t.input_schema))), tokenizer)
        for t in converted.tools
    )
    raw += sum(count_text(compact_json(t), tokenizer) for t in converted.other_tools)
    return min(deferral.scaled(raw, scale), limit)


def window_shortfall(
    session: Session, body: dict[str, Any], converted: Converted, limit_hint: str
) -> str | None:
    """The message of the 400 when the window cannot hold one call (module doc), else None;
    ``limit_hint`` says how the client lowers its output limit (``Dialect.output_limit_hint``)."""
    tokenizer = accounting.tokenizer_of(session)
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        max_tokens = session.max_output_tokens
    system = sum(count_text(s.content, tokenizer) for s in converted.sections)
    tools = _tool_tokens(session, converted)
    need = system + tools + max_tokens + session.buffer_tokens
    if need <= session.context_window:
        return None
    return (
        f"contextsvc: this session's context window of {session.context_window:,} tokens cannot "
        f"hold one request: the system prompt ({system:,} tokens) + the tools ({tools:,}) + "
        f"max_tokens ({max_tokens:,}) + the safety buffer ({session.buffer_tokens:,}) = "
        f"{need:,} tokens. Fix: "
        + limit_hint.format(suggest=f"{max(1, session.context_window // 8):,}")
        + f", give session {session.external_id!r} a larger context_window "
        "(PATCH /api/v1/sessions/<id>), or send fewer tools."
    )
