"""Built-in tools the service itself executes for agents.

Each issue's module registers its tools here at start-up
(``tool_output_cache``, ``tool_output_cache_grep``, ``compact_context``,
``tool_search``); ``GET /tools`` lists their definitions in provider formats
and ``POST /sessions/{sid}/tools/{name}/call`` runs one with the arguments the
model produced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contextsvc.engine.messages import ToolDef
from contextsvc.errors import NotFound

from .models import Session

Handler = Callable[[Session, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class BuiltinTool:
    definition: ToolDef
    handler: Handler


REGISTRY: dict[str, BuiltinTool] = {}


def register(definition: ToolDef, handler: Handler) -> None:
    REGISTRY[definition.name] = BuiltinTool(definition=definition, handler=handler)


def definitions() -> list[ToolDef]:
    return [tool.definition for tool in REGISTRY.values()]


def as_format(tool: ToolDef, fmt: str) -> dict[str, Any]:
    if fmt == "openai":
        return {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.input_schema,
            },
        }
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def call(session: Session, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    tool = REGISTRY.get(name)
    if tool is None:
        raise NotFound(f"No built-in tool {name!r}; see GET /api/v1/tools")
    return tool.handler(session, arguments)
