"""Built-in tools run inside the proxy: the client never receives a call to a tool it did not define.

With ``policy.proxy.builtin_tools`` on (the default) the session's tools are
the client's plus the service's built-ins (``REGISTRY.tools``: output cache
read and grep, ``compact_context``; ``tool_search`` comes with deferral) that
the client does not define itself. When the model calls one, the proxy runs
it, stores the call and its result in the transcript, and — when every call
of the answer was a built-in — asks upstream again with the new context. When
the answer also calls the client's tools, the built-in calls are taken out of
what the client receives (their results are already stored).
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
from sessions.services.append import session_append_messages
from sessions.services.inputs import MessageData, ToolData

# Rounds of built-in calls one client call may take before the answer goes back as it is.
MAX_ROUNDS = 8


def builtins_on(session: Session) -> bool:
    return bool(((session.policy or {}).get("proxy") or {}).get("builtin_tools", True))


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
    """The built-ins the proxy runs on this call (none with the policy off)."""
    if not builtins_on(session):
        return frozenset()
    return frozenset(set(REGISTRY.tools) - client_tool_names(converted))


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


def strip_anthropic(response: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """A Messages response without the ``tool_use`` blocks of the given tools."""
    content = [
        b
        for b in response.get("content") or ()
        if not (b.get("type") == "tool_use" and b.get("name") in names)
    ]
    return {**response, "content": content}


def strip_openai(response: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """A chat completion without the tool calls of the given tools."""
    choices = []
    for choice in response.get("choices") or ():
        message = dict(choice.get("message") or {})
        calls = [
            c
            for c in message.get("tool_calls") or ()
            if (c.get("function") or {}).get("name") not in names
        ]
        if message.get("tool_calls") is not None:
            message["tool_calls"] = calls or None
        choices.append({**choice, "message": message})
    return {**response, "choices": choices}
