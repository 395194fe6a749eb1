"""The OpenAI Chat Completions request rules a built body must pass, as a validator.

``validate_chat(body)`` raises ``InvalidChatRequest`` with the API's wording
(where it has one) for what ``POST /v1/chat/completions`` rejects with a 400:

- ``model`` / ``messages`` missing, an unknown role, a user message without
  content, an assistant message with neither content nor ``tool_calls``;
- an assistant message with ``tool_calls`` not followed by one ``tool``
  message per ``tool_call_id`` (before any other message);
- a ``tool`` message that answers no call of the assistant message before its
  run of tool messages, or answers one twice;
- a tool call that is not ``{"id", "type": "function", "function": {"name",
  "arguments"}}`` with ``arguments`` a JSON string, and tool-call ids that
  repeat within the request;
- tools that are not ``{"type": "function", "function": {"name", ...}}``.

One rule is the service's, not OpenAI's: the conversation (after the system
messages) starts with a user message, so it has one. OpenAI accepts an assistant first, but
many OpenAI-compatible servers' chat templates (and every Anthropic-backed
proxy) do not, and the service sends the same history in every format.
"""

from __future__ import annotations

import json
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")


class InvalidChatRequest(Exception):
    pass


def _check_call(i: int, k: int, call: Any) -> str:
    where = f"messages[{i}].tool_calls[{k}]"
    if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
        raise InvalidChatRequest(f"Missing required parameter: '{where}.id'.")
    if call.get("type") != "function":
        raise InvalidChatRequest(f"Invalid value for '{where}.type': expected 'function'.")
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise InvalidChatRequest(f"Missing required parameter: '{where}.function.name'.")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        raise InvalidChatRequest(
            f"Invalid type for '{where}.function.arguments': expected a string."
        )
    try:
        json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise InvalidChatRequest(f"'{where}.function.arguments' is not valid JSON") from exc
    return call["id"]


def validate_chat(body: dict[str, Any]) -> None:
    """Raise ``InvalidChatRequest`` for what Chat Completions rejects (see the module doc)."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidChatRequest("Missing required parameter: 'model'.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidChatRequest("Invalid 'messages': empty array. Expected at least one.")
    for t, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict):
            raise InvalidChatRequest(f"Missing required parameter: 'tools[{t}].function'.")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise InvalidChatRequest(f"Missing required parameter: 'tools[{t}].function.name'.")
    conversation = [m for m in messages if m.get("role") not in ("system", "developer")]
    if not conversation or conversation[0].get("role") != "user":
        raise InvalidChatRequest(
            "the conversation must start with a user message (after system messages)"
        )
    call_ids: set[str] = set()
    expected: list[str] = []  # ids of the last assistant's calls still to be answered
    answerable: set[str] = set()  # ids the current run of tool messages may answer
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:
            raise InvalidChatRequest(
                f"Invalid value: '{role}'. Supported values are: {', '.join(map(repr, ROLES))}."
            )
        if role != "tool" and expected:
            raise InvalidChatRequest(
                "An assistant message with 'tool_calls' must be followed by tool messages"
                " responding to each 'tool_call_id'. The following tool_call_ids did not have"
                f" response messages: {', '.join(expected)}"
            )
        if role != "tool":
            answerable = set()
        content = message.get("content")
        if role in ("system", "developer", "user"):
            if content is None or content == [] or (role == "user" and content == ""):
                raise InvalidChatRequest(f"Missing required parameter: 'messages[{i}].content'.")
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if content is None and not calls:
                raise InvalidChatRequest(
                    f"Invalid value for 'messages[{i}].content': expected content or tool_calls."
                )
            for k, call in enumerate(calls):
                call_id = _check_call(i, k, call)
                if call_id in call_ids:
                    raise InvalidChatRequest(
                        f"Duplicate value for 'tool_call_id' of {call_id} in"
                        f" 'messages[{i}].tool_calls[{k}].id'."
                    )
                call_ids.add(call_id)
            expected = [c["id"] for c in calls]
            answerable = set(expected)
        else:  # tool
            call_id = message.get("tool_call_id")
            if call_id not in answerable:
                raise InvalidChatRequest(
                    "Invalid parameter: messages with role 'tool' must be a response to a"
                    f" preceeding message with 'tool_calls' (messages[{i}], {call_id!r})."
                )
            answerable.discard(call_id)
            expected = [c for c in expected if c != call_id]
            if not isinstance(content, str) and not isinstance(content, list):
                raise InvalidChatRequest(f"Missing required parameter: 'messages[{i}].content'.")
    if expected:
        raise InvalidChatRequest(
            "An assistant message with 'tool_calls' must be followed by tool messages"
            " responding to each 'tool_call_id'. The following tool_call_ids did not have"
            f" response messages: {', '.join(expected)}"
        )
