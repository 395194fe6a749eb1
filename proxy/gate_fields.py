"""The proxy's per-field rules: the types and lengths its converters and columns assume.

Run on a parsed body before anything is read or written for it. Each rule
names the field in the provider's own dotted path (``messages.3.content.0.id``).
The converters (``engine.providers``) still check what the provider itself
would refuse; the rules here are what they and the stores take for granted:
a name or id fits its ``varchar(200)``, a list is a list, a number is a
number in range, free-form JSON is not deeper than the gate's cap
(``contextsvc.body_gate``). Messages with string content cost one type
test; only structured content is walked.
"""

from __future__ import annotations

from typing import Any

from contextsvc.body_gate import BodyRefused, json_problem

from .object_prefix import accepted

MAX_NAME = 200  # model, tool and call names and ids: the columns hold 200 characters
MAX_TOKENS = 100_000_000  # as the REST API's bound on token counts

TEXT_PARTS = frozenset(("text", "input_text", "output_text"))


def one_of(value: Any, allowed: frozenset[str]) -> bool:
    return type(value) is str and value in allowed


def refuse(message: str, field: str) -> None:
    raise BodyRefused(message, field)


def free_json(value: Any, field: str) -> None:
    problem = json_problem(value)
    if problem is not None:
        refuse(problem, field)


def name(value: Any, field: str, *, required: bool = True) -> None:
    """A model, tool or call name or id: a string of 1 to 200 characters."""
    if value is None and not required:
        return
    if type(value) is not str:
        refuse("expected a string", field)
    if not value and required:
        refuse("must not be empty", field)
    if len(value) > MAX_NAME:
        refuse(f"at most {MAX_NAME} characters", field)


def text(value: Any, field: str, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    if type(value) is not str:
        refuse("expected a string", field)


def tool_type(tool: dict[str, Any], where: str, default: str) -> str:
    """A tool's ``type``: absent means ``default``; present, it is a name like any other."""
    if "type" not in tool:
        return default
    name(tool["type"], f"{where}.type")
    return tool["type"]


def count(value: Any, field: str) -> None:
    if value is None:
        return
    if type(value) is not int or not 0 < value <= MAX_TOKENS:
        refuse(f"expected an integer from 1 to {MAX_TOKENS}", field)


def flag(value: Any, field: str) -> None:
    if value is not None and type(value) is not bool:
        refuse("expected a boolean", field)


def listed(value: Any, field: str) -> list[Any]:
    if type(value) is not list:
        refuse("expected an array", field)
    return value


def envelope(body: dict[str, Any], managed: tuple[str, ...], numbers: tuple[str, ...]) -> None:
    """What every dialect shares: the model, token limits, ``stream``, unmanaged fields' JSON."""
    name(body.get("model"), "model")
    for key in numbers:
        count(body.get(key), key)
    flag(body.get("stream"), "stream")
    for key, value in body.items():
        if key not in managed and type(value) in (dict, list):
            free_json(value, key)


def parts(content: list[Any], field: str) -> None:
    """Content parts: objects with a string ``type``; a text part's ``text`` a string."""
    for j, part in enumerate(content):
        where = f"{field}.{j}"
        if type(part) is not dict or type(part.get("type")) is not str:
            refuse("expected a content part with a type", where)
        if part["type"] in TEXT_PARTS:
            text(part.get("text"), f"{where}.text", optional=False)


def objects(messages: list[Any], field: str) -> None:
    """Every message (item) an object: what reads the whole history before it is converted
    (the conversation's id, the prefix match) takes that for granted. Those the gate took
    from the conversation's previous accepted body (``object_prefix.accepted``) are."""
    start = accepted(messages)
    new = messages[start:] if start else messages
    if set(map(type, new)) <= {dict}:  # the common case, in C: no loop per message
        return
    for i, message in enumerate(new, start):
        if type(message) is not dict:
            refuse("expected an object", f"{field}.{i}")


def through_first_user(messages: list[dict[str, Any]]) -> int:
    """How many leading messages the conversation's id reads: up to the first user one."""
    for i, message in enumerate(messages):
        if message.get("role") == "user":
            return i + 1
    return len(messages)


def leading(messages: Any, field: str) -> list[Any]:
    """All messages checked to be objects; those through the first user message returned
    for the full rules (the rest are checked where they are converted: only what is new)."""
    messages = listed(messages, field)
    objects(messages, field)
    return messages[: through_first_user(messages)]
