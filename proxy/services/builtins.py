"""Built-in tools run inside the proxy: the client never receives a call to a tool it did not define.

With ``policy.proxy.builtin_tools`` on (the default) the session's tools are
the client's plus the service's built-ins (``REGISTRY.tools``: output cache
read and grep, ``compact_context``; ``tool_search`` comes with deferral) that
the client does not define itself. When the model calls one, the proxy runs
it, stores the call and its result in the transcript, and — when every call
of the answer was a built-in — asks upstream again with the new context, up
to ``policy.proxy.max_builtin_rounds`` rounds; the last is sent without the
built-ins (``without_builtins``). When the answer also calls the client's
tools, the built-in calls are taken out of what the client receives (their
results are already stored); an answer left with nothing gets a short note
saying why (``limit_note``), never an empty message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from contextsvc.engine.deferral import TOOL_SEARCH_NAME
from contextsvc.engine.providers.common import Converted
from contextsvc.errors import ServiceError
from sessions.extensions import REGISTRY
from sessions.models import Session
from sessions.schemas_policy import ProxyPolicy
from sessions.services.append import session_append_messages
from sessions.services.inputs import MessageData, ToolData

# Rounds of built-in calls one client call may take when the session sets none
# (the schema's default, so the two cannot drift apart).
MAX_ROUNDS: int = ProxyPolicy.model_fields["max_builtin_rounds"].default

# Calls a round-limit note names at most, and characters of arguments each.
_NOTE_CALLS = 5
_NOTE_ARGS_CHARS = 160


def _proxy_policy(session: Session) -> dict[str, Any]:
    return (session.policy or {}).get("proxy") or {}


def builtins_on(session: Session) -> bool:
    return bool(_proxy_policy(session).get("builtin_tools", True))


def max_rounds(session: Session) -> int:
    """``policy.proxy.max_builtin_rounds``: upstream rounds one client call may take."""
    value = _proxy_policy(session).get("max_builtin_rounds")
    return value if isinstance(value, int) and value >= 1 else MAX_ROUNDS


def client_tool_names(converted: Converted) -> set[str]:
    names = {t.name for t in converted.tools}
    names.update(t["name"] for t in converted.other_tools if isinstance(t.get("name"), str))
    names.update(
        t["function"]["name"]
        for t in converted.other_tools
        if isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
    )
    return names


def runnable_names(session: Session, converted: Converted) -> frozenset[str]:
    """The built-ins the proxy runs on this call (none with the policy off, nor on a side
    request that offers no tools: a title, routing or summary question answers in one go,
    and the service's tools would only cost it tokens)."""
    if not builtins_on(session):
        return frozenset()
    client = client_tool_names(converted)
    if not client and session.parent_id is not None:
        return frozenset()
    return frozenset(set(REGISTRY.tools) - client)


def builtin_tool_data(names: frozenset[str]) -> list[ToolData]:
    """The definitions to register with the client's tools (``tool_search`` comes with deferral)."""
    out: list[ToolData] = []
    for name in sorted(names - {TOOL_SEARCH_NAME}):
        tool = REGISTRY.tools[name].definition
        out.append(
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
                "category": "builtin",
            }
        )
    return out


def split_calls(
    calls: Sequence[dict[str, Any]], runnable: frozenset[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(built-in calls the proxy runs, the client's calls)."""
    ours = [c for c in calls if c["name"] in runnable]
    return ours, [c for c in calls if c["name"] not in runnable]


def session_run_builtin_calls(*, session: Session, calls: Sequence[dict[str, Any]]) -> None:
    """Run each call and append its result as the tool message answering it."""
    results: list[MessageData] = []
    for call in calls:
        try:
            result: Any = REGISTRY.tools[call["name"]].handler(session, call.get("arguments") or {})
        except ServiceError as exc:
            result = {"error": exc.message}
        results.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "name": call["name"],
                "content": json.dumps(result, ensure_ascii=False, default=str),
            }
        )
    if results:
        session_append_messages(session=session, messages=results)


def without_builtins(body: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
    """The upstream body of a last round: the built-in tools taken out of ``tools``,
    and a ``tool_choice`` naming one of them dropped, so the model answers or
    calls the client's own tools (any provider's shape)."""
    if not names or not body.get("tools"):
        return body
    out = dict(body)
    tools = [t for t in (_without_declared(t, names) for t in body["tools"]) if t is not None]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and _tool_name(choice) in names:
        out.pop("tool_choice", None)
    if tools:
        out["tools"] = tools
    else:
        out.pop("tools", None)
        out.pop("tool_choice", None)
    return out


def _without_declared(tool: dict[str, Any], names: frozenset[str]) -> dict[str, Any] | None:
    """``tool`` less the built-ins (None: nothing left); a Gemini entry declares several."""
    declarations = tool.get("functionDeclarations")
    if not isinstance(declarations, list):
        return None if _tool_name(tool) in names else tool
    kept = [d for d in declarations if not (isinstance(d, dict) and d.get("name") in names)]
    return {**tool, "functionDeclarations": kept} if kept else None


def _tool_name(tool: dict[str, Any]) -> str | None:
    """A tool's or a tool_choice's name: Anthropic / Responses ``name``, Chat ``function.name``."""
    if isinstance(tool.get("name"), str):
        return tool["name"]
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else None


def limit_note(limit: int, calls: Sequence[dict[str, Any]]) -> str:
    """What a client is told instead of an empty answer: the round limit and the last calls."""
    shown = []
    for call in calls[:_NOTE_CALLS]:
        arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False, default=str)
        if len(arguments) > _NOTE_ARGS_CHARS:
            arguments = arguments[: _NOTE_ARGS_CHARS - 1] + "…"
        shown.append(f"{call['name']} {arguments}")
    more = f" and {len(calls) - _NOTE_CALLS} more" if len(calls) > _NOTE_CALLS else ""
    return (
        f"[contextsvc proxy: the built-in tools' round limit ({limit}, "
        f"policy.proxy.max_builtin_rounds) was reached before the model answered. "
        f"Its last calls were: {'; '.join(shown)}{more}. Their results are stored in the "
        f"session; send another message to continue.]"
    )
