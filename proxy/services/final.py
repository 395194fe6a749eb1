"""The final-report tool on a proxied final turn: the client gets the report as the answer's text.

On a final turn (docs/concepts/guard.md#final-turn) the build offers one tool, the final
report. A client that does not define a tool of that name must never receive
a call to it: the proxy turns the call into text — in what it stores (so the
transcript has no call left unanswered) and in what the client receives,
whole (here) or streamed (``proxy.streaming``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any


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


def report_text(arguments: Any) -> str:
    """The report of a final-report call (its ``report``; else its arguments as JSON text)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    if isinstance(arguments, dict) and isinstance(arguments.get("report"), str):
        return arguments["report"]
    return json.dumps(arguments, ensure_ascii=False)


def with_text(content: Any, text: str) -> Any:
    """``content`` (a string or parts) with ``text`` after it: a part, or a paragraph."""
    if isinstance(content, list):
        return [*content, {"type": "text", "text": text}]
    content = content or ""
    return f"{content}\n\n{text}" if content.strip() else text


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


def anthropic_as_text(response: dict[str, Any], name: str) -> dict[str, Any]:
    """A Messages response with its ``tool_use`` blocks of ``name`` turned into text blocks."""
    content = []
    for block in response.get("content") or ():
        if block.get("type") == "tool_use" and block.get("name") == name:
            block = {"type": "text", "text": report_text(block.get("input"))}
        content.append(block)
    out = {**response, "content": content}
    if out.get("stop_reason") == "tool_use" and not any(
        b.get("type") == "tool_use" for b in content
    ):
        out["stop_reason"] = "end_turn"
    return out


def openai_as_text(response: dict[str, Any], name: str) -> dict[str, Any]:
    """A chat completion with its tool calls of ``name`` turned into the message's text."""
    choices = []
    for choice in response.get("choices") or ():
        message = dict(choice.get("message") or {})
        calls = message.get("tool_calls") or []
        finals = [c for c in calls if (c.get("function") or {}).get("name") == name]
        if finals:
            rest = [c for c in calls if c not in finals]
            message["tool_calls"] = rest or None
            for call in finals:
                text = report_text((call.get("function") or {}).get("arguments"))
                message["content"] = with_text(message.get("content"), text)
            choice = {**choice, "message": message}
            if not rest and choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
        choices.append(choice)
    return {**response, "choices": choices}


def report_item(call: dict[str, Any]) -> dict[str, Any]:
    """A Responses ``function_call`` item of the final report as an assistant message item.

    Its id comes from the call's: the stream's filter and the whole answer make
    the same item, so the client's echo of it matches (``client_message``).
    """
    key = str(call.get("call_id") or call.get("id") or call.get("arguments") or "")
    text = report_text(call.get("arguments"))
    return {
        "type": "message",
        "id": f"msg_report_{hashlib.sha256(key.encode()).hexdigest()[:24]}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def responses_as_text(response: dict[str, Any], name: str) -> dict[str, Any]:
    """A Responses answer with its ``function_call`` items of ``name`` turned into messages."""
    output = [
        report_item(item)
        if isinstance(item, dict)
        and item.get("type") == "function_call"
        and item.get("name") == name
        else item
        for item in response.get("output") or ()
    ]
    return {**response, "output": output}
