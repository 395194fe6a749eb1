"""The Messages API's field rules (``proxy.gate_fields``: what they are for)."""

from __future__ import annotations

from typing import Any

from ..gate_fields import (
    flag,
    free_json,
    listed,
    name,
    one_of,
    parts,
    refuse,
    text,
    tool_type,
)

_ROLES = frozenset(("user", "assistant", "system"))


def anthropic_tools(tools: Any) -> None:
    for i, tool in enumerate(listed(tools, "tools")):
        where = f"tools.{i}"
        if type(tool) is not dict:
            refuse("expected an object", where)
        kind = tool_type(tool, where, "custom")
        name(tool.get("name"), f"{where}.name")
        text(tool.get("description"), f"{where}.description")
        if "input_schema" in tool and kind == "custom":
            if type(tool["input_schema"]) is not dict:
                refuse("expected an object", f"{where}.input_schema")
        free_json(tool, where)


def anthropic_system(system: Any) -> None:
    if system is None or type(system) is str:
        return
    for i, block in enumerate(listed(system, "system")):
        if type(block) is not dict or block.get("type") != "text":
            refuse("expected a text block", f"system.{i}")
        text(block.get("text"), f"system.{i}.text", optional=False)
        free_json(block, f"system.{i}")


def anthropic_messages(messages: list[Any], base: int = 0) -> None:
    for i, message in enumerate(messages, base):
        where = f"messages.{i}"
        if type(message) is not dict:
            refuse("expected an object", where)
        if not one_of(message.get("role"), _ROLES):
            refuse("expected 'user', 'assistant' or 'system'", f"{where}.role")
        content = message.get("content")
        if type(content) is str:
            if len(message) > 2:
                free_json(message, where)
            continue
        if type(content) is not list:
            refuse("expected a string or an array of content blocks", f"{where}.content")
        free_json(message, where)
        _anthropic_blocks(content, f"{where}.content")


def _anthropic_blocks(content: list[Any], field: str) -> None:
    parts(content, field)
    for j, block in enumerate(content):
        kind, where = block["type"], f"{field}.{j}"
        if kind == "tool_use":
            name(block.get("id"), f"{where}.id")
            name(block.get("name"), f"{where}.name")
            if type(block.get("input", {})) is not dict:
                refuse("expected an object", f"{where}.input")
        elif kind == "tool_result":
            name(block.get("tool_use_id"), f"{where}.tool_use_id")
            flag(block.get("is_error"), f"{where}.is_error")
            result = block.get("content", "")
            if type(result) is list:
                parts(result, f"{where}.content")
            elif type(result) is not str:
                refuse("expected a string or an array of content blocks", f"{where}.content")
