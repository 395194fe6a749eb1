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

MAX_NAME = 200  # model, tool and call names and ids: the columns hold 200 characters
MAX_TOKENS = 100_000_000  # as the REST API's bound on token counts

_ANTHROPIC_ROLES = frozenset(("user", "assistant", "system"))
_CHAT_ROLES = frozenset(("system", "developer", "user", "assistant", "tool", "function"))
_RESPONSES_ROLES = frozenset(("user", "assistant", "system", "developer"))
TEXT_PARTS = frozenset(("text", "input_text", "output_text"))


def _one_of(value: Any, allowed: frozenset[str]) -> bool:
    return type(value) is str and value in allowed


def _refuse(message: str, field: str) -> None:
    raise BodyRefused(message, field)


def free_json(value: Any, field: str) -> None:
    problem = json_problem(value)
    if problem is not None:
        _refuse(problem, field)


def name(value: Any, field: str, *, required: bool = True) -> None:
    """A model, tool or call name or id: a string of 1 to 200 characters."""
    if value is None and not required:
        return
    if type(value) is not str:
        _refuse("expected a string", field)
    if not value and required:
        _refuse("must not be empty", field)
    if len(value) > MAX_NAME:
        _refuse(f"at most {MAX_NAME} characters", field)


def text(value: Any, field: str, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    if type(value) is not str:
        _refuse("expected a string", field)


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
        _refuse(f"expected an integer from 1 to {MAX_TOKENS}", field)


def flag(value: Any, field: str) -> None:
    if value is not None and type(value) is not bool:
        _refuse("expected a boolean", field)


def listed(value: Any, field: str) -> list[Any]:
    if type(value) is not list:
        _refuse("expected an array", field)
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
            _refuse("expected a content part with a type", where)
        if part["type"] in TEXT_PARTS:
            text(part.get("text"), f"{where}.text", optional=False)


def objects(messages: list[Any], field: str) -> None:
    """Every message (item) an object: what reads the whole history before it is converted
    (the conversation's id, the prefix match) takes that for granted."""
    if set(map(type, messages)) <= {dict}:  # the common case, in C: no loop per message
        return
    for i, message in enumerate(messages):
        if type(message) is not dict:
            _refuse("expected an object", f"{field}.{i}")


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


# --- Anthropic Messages -----------------------------------------------------------


def anthropic_tools(tools: Any) -> None:
    for i, tool in enumerate(listed(tools, "tools")):
        where = f"tools.{i}"
        if type(tool) is not dict:
            _refuse("expected an object", where)
        kind = tool_type(tool, where, "custom")
        name(tool.get("name"), f"{where}.name")
        text(tool.get("description"), f"{where}.description")
        if "input_schema" in tool and kind == "custom":
            if type(tool["input_schema"]) is not dict:
                _refuse("expected an object", f"{where}.input_schema")
        free_json(tool, where)


def anthropic_system(system: Any) -> None:
    if system is None or type(system) is str:
        return
    for i, block in enumerate(listed(system, "system")):
        if type(block) is not dict or block.get("type") != "text":
            _refuse("expected a text block", f"system.{i}")
        text(block.get("text"), f"system.{i}.text", optional=False)
        free_json(block, f"system.{i}")


def anthropic_messages(messages: list[Any], base: int = 0) -> None:
    for i, message in enumerate(messages, base):
        where = f"messages.{i}"
        if type(message) is not dict:
            _refuse("expected an object", where)
        if not _one_of(message.get("role"), _ANTHROPIC_ROLES):
            _refuse("expected 'user', 'assistant' or 'system'", f"{where}.role")
        content = message.get("content")
        if type(content) is str:
            if len(message) > 2:
                free_json(message, where)
            continue
        if type(content) is not list:
            _refuse("expected a string or an array of content blocks", f"{where}.content")
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
                _refuse("expected an object", f"{where}.input")
        elif kind == "tool_result":
            name(block.get("tool_use_id"), f"{where}.tool_use_id")
            flag(block.get("is_error"), f"{where}.is_error")
            result = block.get("content", "")
            if type(result) is list:
                parts(result, f"{where}.content")
            elif type(result) is not str:
                _refuse("expected a string or an array of content blocks", f"{where}.content")


# --- OpenAI Chat Completions -------------------------------------------------------


def function_tool(function: Any, where: str) -> None:
    if type(function) is not dict:
        _refuse("expected an object", where)
    name(function.get("name"), f"{where}.name")
    text(function.get("description"), f"{where}.description")
    if function.get("parameters") is not None and type(function["parameters"]) is not dict:
        _refuse("expected an object", f"{where}.parameters")


def chat_tools(tools: Any) -> None:
    for i, tool in enumerate(listed(tools, "tools")):
        where = f"tools.{i}"
        if type(tool) is not dict:
            _refuse("expected an object", where)
        if tool_type(tool, where, "function") == "function":
            function_tool(tool.get("function"), f"{where}.function")
        free_json(tool, where)


def chat_messages(messages: list[Any], base: int = 0) -> None:
    for i, message in enumerate(messages, base):
        where = f"messages.{i}"
        if type(message) is not dict:
            _refuse("expected an object", where)
        if not _one_of(message.get("role"), _CHAT_ROLES):
            _refuse("expected a message role", f"{where}.role")
        name(message.get("name"), f"{where}.name", required=False)
        name(message.get("tool_call_id"), f"{where}.tool_call_id", required=False)
        content = message.get("content")
        if type(content) is list:
            parts(content, f"{where}.content")
        elif content is not None and type(content) is not str:
            _refuse("expected a string or an array of content parts", f"{where}.content")
        calls = message.get("tool_calls")
        if calls is not None:
            for j, call in enumerate(listed(calls, f"{where}.tool_calls")):
                at = f"{where}.tool_calls.{j}"
                if type(call) is not dict:
                    _refuse("expected an object", at)
                name(call.get("id"), f"{at}.id")
                function = call.get("function")
                if type(function) is not dict:
                    _refuse("expected an object", f"{at}.function")
                name(function.get("name"), f"{at}.function.name")
                arguments = function.get("arguments")
                if arguments is not None and type(arguments) not in (str, dict):
                    _refuse("expected a string", f"{at}.function.arguments")
        if type(content) is not str or len(message) > 2:
            free_json(message, where)


# --- OpenAI Responses --------------------------------------------------------------


def responses_tools(tools: Any) -> None:
    for i, tool in enumerate(listed(tools, "tools")):
        where = f"tools.{i}"
        if type(tool) is not dict:
            _refuse("expected an object", where)
        if tool_type(tool, where, "") == "function":
            function_tool(tool, where)
        free_json(tool, where)


def responses_input(items: Any, base: int = 0) -> None:
    if type(items) is str or items is None:
        return
    for i, item in enumerate(listed(items, "input"), base):
        where = f"input.{i}"
        if type(item) is not dict:
            _refuse("expected an object", where)
        kind = item.get("type")
        if kind is not None and type(kind) is not str:
            _refuse("expected a string", f"{where}.type")
        if kind == "message" or (kind is None and "role" in item):
            if not _one_of(item.get("role"), _RESPONSES_ROLES):
                _refuse("expected a message role", f"{where}.role")
            content = item.get("content")
            if type(content) is list:
                parts(content, f"{where}.content")
            elif type(content) is not str:
                _refuse("expected a string or an array of content parts", f"{where}.content")
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
                _refuse("expected a string or an array of content parts", f"{where}.output")
        name(item.get("id"), f"{where}.id", required=False)
        free_json(item, where)


def responses_units(units: list[dict[str, Any]], base: int) -> None:
    """The item rules on units (``openai_responses.group_units``) a call converts."""
    responses_input([item for unit in units for item in unit["items"]], base)


# --- Gemini generateContent --------------------------------------------------------

_GEMINI_ROLES = frozenset(("user", "model"))
GEMINI_MANAGED = ("contents", "systemInstruction", "system_instruction", "tools")


def gemini_envelope(body: dict[str, Any]) -> None:
    """The model is the URL's: a body needs none. Free-form fields' JSON; the output limit."""
    if "model" in body:
        name(body["model"], "model")
    config = body.get("generationConfig")
    if config is not None and type(config) is not dict:
        _refuse("expected an object", "generationConfig")
    count((config or {}).get("maxOutputTokens"), "generationConfig.maxOutputTokens")
    for key, value in body.items():
        if key not in GEMINI_MANAGED and type(value) in (dict, list):
            free_json(value, key)


def gemini_system(system: Any) -> None:
    if system is None or type(system) is str:
        return
    field = "systemInstruction"
    if type(system) is not dict:
        _refuse("expected an object with parts", field)
    for j, part in enumerate(listed(system.get("parts"), f"{field}.parts")):
        if type(part) is not dict:
            _refuse("expected an object", f"{field}.parts.{j}")
        text(part.get("text"), f"{field}.parts.{j}.text", optional=False)


def gemini_tools(tools: Any) -> None:
    for i, tool in enumerate(listed(tools, "tools")):
        where = f"tools.{i}"
        if type(tool) is not dict:
            _refuse("expected an object", where)
        free_json(tool, where)
        key = "functionDeclarations" if "functionDeclarations" in tool else "function_declarations"
        if tool.get(key) is None:
            continue
        for j, decl in enumerate(listed(tool[key], f"{where}.{key}")):
            if type(decl) is not dict:
                _refuse("expected an object", f"{where}.{key}.{j}")
            name(decl.get("name"), f"{where}.{key}.{j}.name")
            text(decl.get("description"), f"{where}.{key}.{j}.description")


def gemini_leading(contents: Any) -> list[Any]:
    contents = listed(contents, "contents")
    if not contents:
        _refuse("contents is not specified", "contents")
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
            _refuse("expected an object", where)
        if "role" in content and not _one_of(content["role"], _GEMINI_ROLES):
            _refuse("Please use a valid role: user, model.", f"{where}.role")
        parts = listed(content.get("parts"), f"{where}.parts")
        if not parts:
            _refuse("must not be empty", f"{where}.parts")
        for j, part in enumerate(parts):
            _gemini_part(part, f"{where}.parts.{j}")


def _gemini_part(part: Any, where: str) -> None:
    if type(part) is not dict:
        _refuse("expected an object", where)
    if "text" in part:  # null is no text: a part with no data, which the build cannot send
        text(part["text"], f"{where}.text", optional=False)
    for key, inner in (("functionCall", "args"), ("functionResponse", "response")):
        if key not in part:
            continue
        value = part[key]
        if type(value) is not dict:
            _refuse("expected an object", f"{where}.{key}")
        name(value.get("name"), f"{where}.{key}.name")
        name(value.get("id"), f"{where}.{key}.id", required=False)
        if value.get(inner) is not None and type(value[inner]) is not dict:
            _refuse("expected an object", f"{where}.{key}.{inner}")
    free_json(part, where)
