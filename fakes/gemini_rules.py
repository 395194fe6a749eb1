"""What the Gemini API refuses in a ``generateContent`` body, with its 400 wording.

``validate`` raises ``InvalidArgument`` (message as the API words it) for:

- no ``contents`` or an empty list ("contents is not specified");
- a role other than ``user`` / ``model`` ("Please use a valid role: user, model.");
- a turn without parts, or a part with none of the data fields;
- a ``functionCall`` turn that does not come right after a user turn (or a
  function response turn), or that is not followed by a user turn with one
  ``functionResponse`` per call ("the number of function response parts is
  equal to the number of function call parts");
- a ``functionResponse`` with no ``functionCall`` turn right before it;
- a response whose name (or id, when both carry one) is not its call's.

The wording of the first four is the API's as clients report it; the name
rule's is the fake's own (the API's text for it is not documented).
"""

from __future__ import annotations

from typing import Any

# The fields of a ``Part``'s ``data`` oneof (one must be set).
DATA_FIELDS = frozenset(
    {
        "text",
        "inlineData",
        "fileData",
        "functionCall",
        "functionResponse",
        "executableCode",
        "codeExecutionResult",
    }
)
COUNT_RULE = (
    "Please ensure that the number of function response parts is equal to the number of"
    " function call parts of the function call turn."
)
CALL_PLACE_RULE = (
    "Please ensure that function call turn comes immediately after a user turn or after a"
    " function response turn."
)
RESPONSE_PLACE_RULE = (
    "Please ensure that function response turn comes immediately after a function call turn."
)


class InvalidArgument(Exception):
    """The API's ``400 INVALID_ARGUMENT`` with its message."""


def _calls(parts: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [p[key] for p in parts if isinstance(p.get(key), dict)]


def _check_parts(i: int, content: Any) -> tuple[str, list[dict[str, Any]]]:
    where = f"GenerateContentRequest.contents[{i}]"
    if not isinstance(content, dict):
        raise InvalidArgument(f"* {where}: Invalid value (content must be an object)")
    role = content.get("role", "user")
    if role not in ("user", "model"):
        raise InvalidArgument("Please use a valid role: user, model.")
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        raise InvalidArgument(f"* {where}.parts: contents.parts must not be empty.")
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or not DATA_FIELDS & set(part):
            raise InvalidArgument(
                f"* {where}.parts[{j}].data: required oneof field 'data' must have one"
                " initialized field"
            )
        if "text" in part and not isinstance(part["text"], str):
            raise InvalidArgument(f"* {where}.parts[{j}].text: Invalid value (text)")
    return role, parts


def _check_pair(i: int, calls: list[dict[str, Any]], responses: list[dict[str, Any]]) -> None:
    if len(responses) != len(calls):
        raise InvalidArgument(COUNT_RULE)
    for k, (call, response) in enumerate(zip(calls, responses, strict=True)):
        if response.get("name") != call.get("name"):
            raise InvalidArgument(
                f"* GenerateContentRequest.contents[{i + 1}].parts[{k}].function_response.name:"
                f" {response.get('name')!r} does not match the function call name"
                f" {call.get('name')!r} of the function call turn."
            )
        if call.get("id") and response.get("id") and call["id"] != response["id"]:
            raise InvalidArgument(
                f"* GenerateContentRequest.contents[{i + 1}].parts[{k}].function_response.id:"
                f" {response['id']!r} does not match the function call id {call['id']!r}."
            )


def validate(body: dict[str, Any]) -> None:
    """Raise ``InvalidArgument`` for what the API refuses (module doc)."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise InvalidArgument("* GenerateContentRequest.contents: contents is not specified")
    turns = [_check_parts(i, c) for i, c in enumerate(contents)]
    for i, (role, parts) in enumerate(turns):
        calls = _calls(parts, "functionCall")
        responses = _calls(parts, "functionResponse")
        if role == "user" and calls:
            raise InvalidArgument(CALL_PLACE_RULE)
        if role == "model" and responses:
            raise InvalidArgument(RESPONSE_PLACE_RULE)
        if responses:
            before = turns[i - 1] if i else None
            if before is None or before[0] != "model" or not _calls(before[1], "functionCall"):
                raise InvalidArgument(RESPONSE_PLACE_RULE)
        if not calls:
            continue
        if i == 0 or turns[i - 1][0] != "user":
            raise InvalidArgument(CALL_PLACE_RULE)
        after = turns[i + 1] if i + 1 < len(turns) else None
        if after is None or after[0] != "user":
            raise InvalidArgument(COUNT_RULE)
        _check_pair(i, calls, _calls(after[1], "functionResponse"))
    _check_tools(body.get("tools"))


def _check_tools(tools: Any) -> None:
    names: set[str] = set()
    for i, tool in enumerate(tools or ()):
        for j, decl in enumerate((tool or {}).get("functionDeclarations") or ()):
            name = decl.get("name") if isinstance(decl, dict) else None
            if not isinstance(name, str) or not name:
                raise InvalidArgument(
                    f"* GenerateContentRequest.tools[{i}].function_declarations[{j}].name:"
                    " Name cannot be empty."
                )
            if name in names:
                raise InvalidArgument(f"Duplicate function declaration found: {name}")
            names.add(name)
            if "parameters" in decl and "parametersJsonSchema" in decl:
                raise InvalidArgument(
                    f"* GenerateContentRequest.tools[{i}].function_declarations[{j}]:"
                    " parameters and parametersJsonSchema cannot both be set."
                )
