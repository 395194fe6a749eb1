"""The Responses API request rules a built body must pass, as a validator.

``validate_responses(body, issued)`` raises ``InvalidResponsesRequest`` with
the API's wording for what ``POST /v1/responses`` rejects with a 400:

- ``model`` missing; ``input`` neither a string nor an array, or an empty
  array (as Chat Completions' ``messages``: minimum length 1); a message with
  an unknown role;
- a ``function_call_output`` with no ``function_call`` of its ``call_id``
  before it ("No tool call found for function call output with call_id …");
- a ``function_call`` left without its output before the next message
  ("No tool output found for function call …");
- ``call_id``\\ s that repeat among the calls;
- a ``reasoning`` item without ``encrypted_content`` (the fake, like the API
  with ``store: false``, keeps nothing: "Item with id … not found"), or with
  one the fake never issued (it was not sent back verbatim);
- ``previous_response_id`` (the fake stores nothing) and items the fake
  cannot read (a ``compaction`` item whose content it did not issue).
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

ROLES = ("user", "assistant", "system", "developer")


class InvalidResponsesRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _kind(item: dict[str, Any]) -> str:
    return str(item.get("type") or ("message" if "role" in item else ""))


def validate_responses(body: dict[str, Any], issued: Container[str]) -> None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidResponsesRequest("Missing required parameter: 'model'.", "model")
    if body.get("previous_response_id"):
        raise InvalidResponsesRequest(
            f"Previous response with id '{body['previous_response_id']}' not found.",
            "previous_response_id",
        )
    items = body.get("input")
    if isinstance(items, str):
        return
    if not isinstance(items, list):
        raise InvalidResponsesRequest("Invalid type for 'input': expected a string or array.")
    if not items:
        raise InvalidResponsesRequest(
            "Invalid 'input': empty array. Expected an array with minimum length 1,"
            " but got an empty array instead.",
            "input",
        )
    calls: set[str] = set()
    open_calls: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidResponsesRequest(f"Invalid type for 'input[{i}]': expected an object.")
        kind = _kind(item)
        if kind == "message":
            if item.get("role") not in ROLES:
                raise InvalidResponsesRequest(
                    f"Invalid value: '{item.get('role')}'.", f"input[{i}].role"
                )
            if open_calls:
                raise InvalidResponsesRequest(
                    f"No tool output found for function call {open_calls[0]}.", "input"
                )
        elif kind in ("function_call", "custom_tool_call"):
            call_id = item.get("call_id")
            if call_id in calls:
                raise InvalidResponsesRequest(
                    f"Duplicate value for 'call_id' of {call_id} in 'input'.", f"input[{i}]"
                )
            calls.add(call_id)
            open_calls.append(call_id)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if call_id not in calls:
                raise InvalidResponsesRequest(
                    f"No tool call found for function call output with call_id {call_id}.",
                    "input",
                )
            if call_id in open_calls:
                open_calls.remove(call_id)
        elif kind == "reasoning":
            content = item.get("encrypted_content")
            if not content:
                raise InvalidResponsesRequest(
                    f"Item with id '{item.get('id')}' not found. Items are not persisted when "
                    "`store` is set to false. Try again with `store` set to true, or remove "
                    "this item from your input.",
                    "input",
                )
            if content not in issued:
                raise InvalidResponsesRequest(
                    f"The encrypted content for item {item.get('id')} could not be verified.",
                    "input",
                )
        elif kind == "compaction" and item.get("encrypted_content") not in issued:
            raise InvalidResponsesRequest(
                "The encrypted content for the compaction item could not be verified.", "input"
            )
    if open_calls:
        raise InvalidResponsesRequest(
            f"No tool output found for function call {open_calls[0]}.", "input"
        )
