"""Built-in tools the service itself executes for agents.

Apps register them in ``sessions.extensions.REGISTRY`` from their
``AppConfig.ready()`` (sessions: ``tool_output_cache``,
``tool_output_cache_grep``; prompting: ``tool_search``; compaction:
``compact_context``). ``GET /tools`` lists their definitions in provider
formats and ``POST /sessions/{sid}/tools/{name}/call`` runs one with the
arguments the model produced.
"""

from __future__ import annotations

from typing import Any

from contextsvc.engine.messages import ToolDef
from contextsvc.errors import NotFound

from .extensions import REGISTRY
from .models import Session


def definitions() -> list[ToolDef]:
    return [tool.definition for tool in REGISTRY.tools.values()]


def as_format(tool: ToolDef, fmt: str) -> dict[str, Any]:
    if fmt == "gemini":  # a ``functionDeclarations`` entry
        return {
            "name": tool.name,
            "description": tool.description,
            "parametersJsonSchema": tool.input_schema,
        }
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
    tool = REGISTRY.tools.get(name)
    if tool is None:
        raise NotFound(f"No built-in tool {name!r}; see GET /api/v1/tools")
    return tool.handler(session, arguments)
