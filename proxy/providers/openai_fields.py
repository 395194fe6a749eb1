"""The OpenAI APIs' field rules, Chat Completions and Responses (``proxy.gate_fields``)."""

from __future__ import annotations

from typing import Any

from ..gate_fields import (
    free_json,
    listed,
    name,
    one_of,
    parts,
    refuse,
    text,
    tool_type,
)

_CHAT_ROLES = frozenset(("system", "developer", "user", "assistant", "tool", "function"))
_RESPONSES_ROLES = frozenset(("user", "assistant", "system", "developer"))


def function_tool(function: Any, where: str) -> None:
    if type(function) is not dict:
        refuse("expected an object", where)
    name(function.get("name"), f"{where}.name")
    text(function.get("description"), f"{where}.description")
    if function.get("parameters") is not None and type(function["parameters"]) is not dict:
        refuse("expected an object", f"{where}.parameters")


def chat_tools(tools: Any) -> None:
    for i, tool in enumerate(listed(tools, "tools")):
        where = f"tools.{i}"
        if type(tool) is not dict:
            refuse("expected an object", where)
        if tool_type(tool, where, "function") == "function":
            function_tool(tool.get("function"), f"{where}.function")
        free_json(tool, where)


def chat_messages(messages: list[Any], base: int = 0) -> None:
    for i, message in enumerate(messages, base):
        where = f"messages.{i}"
        if type(message) is not dict:
            refuse("expected an object", where)
        if not one_of(message.get("role"), _CHAT_ROLES):
            refuse("expected a message role", f"{where}.role")
        name(message.get("name"), f"{where}.name", required=False)
        name(message.get("tool_call_id"), f"{where}.tool_call_id", required=False)
        content = message.get("content")
        if type(content) is list:
            parts(content, f"{where}.content")
        elif content is not None and type(content) is not str:
            refuse("expected a string or an array of content parts", f"{where}.content")
        calls = message.get("tool_calls")
        if calls is not None:
            for j, call in enumerate(listed(calls, f"{where}.tool_calls")):
                at = f"{where}.tool_calls.{j}"
                if type(call) is not dict:
                    refuse("expected an object", at)
                name(call.get("id"), f"{at}.id")
                function = call.get("function")
                if type(function) is not dict:
                    refuse("expected an object", f"{at}.function")
                name(function.get("name"), f"{at}.function.name")
                arguments = function.get("arguments")
                if arguments is not None and type(arguments) not in (str, dict):
                    refuse("expected a string", f"{at}.function.arguments")
        if type(content) is not str or len(message) > 2:
            free_json(message, where)


def responses_tools(tools: Any) -> None:
    for i, tool in enumerate(listed(tools, "tools")):
        where = f"tools.{i}"
        if type(tool) is not dict:
            refuse("expected an object", where)
        if tool_type(tool, where, "") == "function":
            function_tool(tool, where)
        free_json(tool, where)


def responses_input(items: Any, base: int = 0) -> None:
    if type(items) is str or items is None:
        return
    for i, item in enumerate(listed(items, "input"), base):
        where = f"input.{i}"
        if type(item) is not dict:
            refuse("expected an object", where)
        kind = item.get("type")
        if kind is not None and type(kind) is not str:
            refuse("expected a string", f"{where}.type")
        if kind == "message" or (kind is None and "role" in item):
            if not one_of(item.get("role"), _RESPONSES_ROLES):
                refuse("expected a message role", f"{where}.role")
            content = item.get("content")
            if type(content) is list:
                parts(content, f"{where}.content")
            elif type(content) is not str:
                refuse("expected a string or an array of content parts", f"{where}.content")
        elif kind in ("function_call", "custom_tool_call"):
            name(item.get("call_id"), f"{where}.call_id")
            name(item.get("name"), f"{where}.name")
            key = "arguments" if kind == "function_call" else "input"
            text(item.get(key), f"{where}.{key}")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            name(item.get("call_id"), f"{where}.call_id")
            output = item.get("output")
            if type(output) is list:
                parts(output, f"{where}.output")
            elif type(output) is not str:
                refuse("expected a string or an array of content parts", f"{where}.output")
        name(item.get("id"), f"{where}.id", required=False)
        free_json(item, where)


def responses_units(units: list[dict[str, Any]], base: int) -> None:
    """The item rules on units (``openai_responses.group_units``) a call converts."""
    responses_input([item for unit in units for item in unit["items"]], base)
