"""Responses API tool definitions to and from the service's ``ToolDef``.

Function tools are flat in the Responses API (``{"type": "function", "name",
"description", "parameters", "strict"}``); their keys ``ToolDef`` has no field
for (``strict`` …) are kept per tool name. Other tools (``web_search``,
``custom`` freeform tools, MCP …) pass through verbatim.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..messages import ToolDef
from .common import ConversionError, function_tool


def tools_to_defs(
    tools: list[dict[str, Any]],
) -> tuple[list[ToolDef], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(function tools, other tools verbatim, extra keys per function tool — ``strict`` …)."""
    defs: list[ToolDef] = []
    others: list[dict[str, Any]] = []
    extras: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ConversionError("Invalid type: expected an object.", f"tools.{i}")
        if tool.get("type") != "function":
            others.append(tool)
            continue
        if not isinstance(tool.get("name"), str):
            raise ConversionError(f"Missing required parameter: 'tools[{i}].name'.", f"tools.{i}")
        defs.append(function_tool(tool["name"], tool.get("description"), tool.get("parameters")))
        extra = {
            k: v for k, v in tool.items() if k not in ("type", "name", "description", "parameters")
        }
        if extra:
            extras[tool["name"]] = extra
    return defs, others, extras


def tools_from_defs(
    defs: Iterable[ToolDef],
    other_tools: Sequence[dict[str, Any]] = (),
    tool_extras: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in defs:
        item: dict[str, Any] = {"type": "function", "name": tool.name}
        if tool.description:
            item["description"] = tool.description
        item["parameters"] = tool.input_schema
        item.update((tool_extras or {}).get(tool.name, {}))
        out.append(item)
    out.extend(other_tools)
    return out
