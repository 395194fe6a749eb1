"""The Gemini API's field rules (``proxy.gate_fields``: what they are for)."""

from __future__ import annotations

from typing import Any

from ..gate_fields import (
    count,
    free_json,
    listed,
    name,
    objects,
    one_of,
    refuse,
    text,
)

_ROLES = frozenset(("user", "model"))
GEMINI_MANAGED = ("contents", "systemInstruction", "system_instruction", "tools")


def gemini_envelope(body: dict[str, Any]) -> None:
    """The model is the URL's: a body needs none. Free-form fields' JSON; the output limit."""
    if "model" in body:
        name(body["model"], "model")
    config = body.get("generationConfig")
    if config is not None and type(config) is not dict:
        refuse("expected an object", "generationConfig")
    count((config or {}).get("maxOutputTokens"), "generationConfig.maxOutputTokens")
    for key, value in body.items():
        if key not in GEMINI_MANAGED and type(value) in (dict, list):
            free_json(value, key)


def gemini_system(system: Any) -> None:
    if system is None or type(system) is str:
        return
    field = "systemInstruction"
    if type(system) is not dict:
        refuse("expected an object with parts", field)
    for j, part in enumerate(listed(system.get("parts"), f"{field}.parts")):
        if type(part) is not dict:
            refuse("expected an object", f"{field}.parts.{j}")
        text(part.get("text"), f"{field}.parts.{j}.text", optional=False)


def gemini_tools(tools: Any) -> None:
    for i, tool in enumerate(listed(tools, "tools")):
        where = f"tools.{i}"
        if type(tool) is not dict:
            refuse("expected an object", where)
        free_json(tool, where)
        key = "functionDeclarations" if "functionDeclarations" in tool else "function_declarations"
        if tool.get(key) is None:
            continue
        for j, decl in enumerate(listed(tool[key], f"{where}.{key}")):
            if type(decl) is not dict:
                refuse("expected an object", f"{where}.{key}.{j}")
            name(decl.get("name"), f"{where}.{key}.{j}.name")
            text(decl.get("description"), f"{where}.{key}.{j}.description")


def gemini_leading(contents: Any) -> list[Any]:
    contents = listed(contents, "contents")
    if not contents:
        refuse("contents is not specified", "contents")
    objects(contents, "contents")
    for i, content in enumerate(contents):  # a missing role is ``user``
        if content.get("role", "user") == "user":
            return contents[: i + 1]
    return contents


def gemini_contents(contents: list[Any], base: int = 0) -> None:
    """Roles, parts, and the calls' and responses' names and JSON."""
    for i, content in enumerate(contents, base):
        where = f"contents.{i}"
        if type(content) is not dict:
            refuse("expected an object", where)
        if "role" in content and not one_of(content["role"], _ROLES):
            refuse("Please use a valid role: user, model.", f"{where}.role")
        parts = listed(content.get("parts"), f"{where}.parts")
        if not parts:
            refuse("must not be empty", f"{where}.parts")
        for j, part in enumerate(parts):
            _gemini_part(part, f"{where}.parts.{j}")


def _gemini_part(part: Any, where: str) -> None:
    if type(part) is not dict:
        refuse("expected an object", where)
    if "text" in part:  # null is no text: a part with no data, which the build cannot send
        text(part["text"], f"{where}.text", optional=False)
    for key, inner in (("functionCall", "args"), ("functionResponse", "response")):
        if key not in part:
            continue
        value = part[key]
        if type(value) is not dict:
            refuse("expected an object", f"{where}.{key}")
        name(value.get("name"), f"{where}.{key}.name")
        name(value.get("id"), f"{where}.{key}.id", required=False)
        if value.get(inner) is not None and type(value[inner]) is not dict:
            refuse("expected an object", f"{where}.{key}.{inner}")
    free_json(part, where)
