"""The final-report tool on a proxied final turn: the client gets the report as the answer's text.

On a final turn (docs/concepts/guard.md#final-turn) the build offers one tool, the final
report. A client that does not define a tool of that name must never receive
a call to it: the proxy turns the call into text — in what it stores (so the
transcript has no call left unanswered) and in what the client receives,
whole (here) or streamed (``proxy.streaming``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..providers.report import report_text, with_text


def final_tool_to_answer(
    built_tools: Iterable[dict[str, Any]], final_name: str, client: set[str]
) -> str | None:
    """The final tool's name when the proxy answers it (offered, and not the client's), else None."""
    if final_name in client:
        return None
    for tool in built_tools:
        if final_name in tool_names(tool):
            return final_name
    return None


def tool_names(tool: dict[str, Any]) -> list[str]:
    """The names a body's tool entry defines: its own (Anthropic, Responses), its
    function's (Chat Completions), or its ``functionDeclarations``' (Gemini)."""
    declarations = tool.get("functionDeclarations")
    if isinstance(declarations, list):
        return [d["name"] for d in declarations if isinstance(d, dict) and "name" in d]
    name = tool.get("name") or (tool.get("function") or {}).get("name")
    return [name] if isinstance(name, str) else []


def message_as_text(message: dict[str, Any], name: str) -> dict[str, Any]:
    """A transcript message with its calls to ``name`` turned into text."""
    calls = message.get("tool_calls") or []
    finals = [c for c in calls if c.get("name") == name]
    if not finals:
        return message
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    rest = [c for c in calls if c.get("name") != name]
    if rest:
        out["tool_calls"] = rest
    for call in finals:
        out["content"] = with_text(out.get("content"), report_text(call.get("arguments")))
    return out
