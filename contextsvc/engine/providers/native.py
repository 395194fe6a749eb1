"""Provider-native message lists to and from the transcript, for the REST API's ``?format=``.

The same converters the proxy uses (``anthropic``, ``openai_chat``,
``openai_responses``), applied to a list of messages as an agent holds them
rather than a whole request body:

- ``anthropic``: Messages API ``messages`` (content blocks with ``tool_use``,
  ``tool_result``, ``thinking`` …); a ``system`` message is a mid-conversation
  one, kept in place;
- ``openai``: Chat Completions ``messages`` (``tool_calls``, ``tool``
  messages); ``system`` / ``developer`` messages are kept in place too —
  the session's prompt sections are set with ``PUT /system``, not here;
- ``responses``: Responses API input items (``message``, ``function_call``,
  ``function_call_output``, ``reasoning`` …); one assistant turn's items
  become one transcript message;
- ``gemini``: Gemini ``contents`` (turns of role ``user`` / ``model`` with
  ``functionCall`` and ``functionResponse`` parts); a user turn's function
  responses become one tool message each.

``to_transcript`` also returns, per transcript message, the index of the
native message or item it starts at, so an error found later (the service's
own checks) names the field the agent sent. Error paths always start with
``messages``: that is the key the API takes the list under.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import anthropic, gemini, openai_chat, openai_responses
from .common import META, ConversionError
from .gemini_contents import contents_from_transcript

FORMATS: tuple[str, ...] = ("anthropic", "openai", "responses", "gemini")

# Input item types the Responses API takes (besides messages), as an agent
# holding a conversation has them: its own calls and their outputs, the
# model's turn items, references to stored items.
RESPONSES_ITEM_TYPES = frozenset(
    {
        "message",
        *openai_responses.CALL_TYPES,
        *openai_responses.OUTPUT_TYPES,
        *openai_responses.TURN_ITEMS,
        "computer_call_output",
        "local_shell_call_output",
        "mcp_approval_response",
        "item_reference",
        "compaction",
    }
)


class NativeFormatError(ConversionError):
    """A message not valid in its named format; ``path`` starts with ``messages``."""

    def __init__(self, fmt: str, message: str, path: str) -> None:
        super().__init__(message, path)
        self.format = fmt


def _renamed(fmt: str, exc: ConversionError) -> NativeFormatError:
    path = exc.path
    for key in ("input", "contents"):
        if path == key or path.startswith(key + "."):
            path = "messages" + path[len(key) :]
    return NativeFormatError(fmt, exc.message, path or "messages")


def _anthropic_starts(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Per transcript message, the Anthropic message it comes from (``messages_to_transcript``)."""
    starts: list[int] = []
    for i, message in enumerate(messages):
        content = message.get("content")
        count = 1
        if message.get("role") == "user" and isinstance(content, list):
            results = sum(1 for b in content if b.get("type") == "tool_result")
            count = results + (1 if results < len(content) or not results else 0)
        starts.extend([i] * count)
    return starts


def _gemini_starts(contents: Sequence[Any]) -> list[int]:
    """Per transcript message, the Gemini turn it comes from (``contents_to_transcript``)."""
    starts: list[int] = []
    for i, content in enumerate(contents):
        parts = content.get("parts") or [] if isinstance(content, dict) else []
        count = 1
        if isinstance(content, dict) and content.get("role", "user") == "user":
            results = sum(1 for p in parts if isinstance(p, dict) and "functionResponse" in p)
            count = results + (1 if results < len(parts) or not results else 0)
        starts.extend([i] * count)
    return starts


def _mark_string(message: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic user / assistant message posted with a string: marked so the
    build gives a string back (a plain string of the service's shape goes out as a block)."""
    if message["role"] in ("user", "assistant") and isinstance(message.get("content"), str):
        return {
            **message,
            "content": [{"type": "text", "text": message["content"], META: {"string": True}}],
        }
    return message


def _check_items(items: Sequence[Any]) -> None:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ConversionError("Invalid type: expected an object.", f"input.{i}")
        kind = openai_responses.item_kind(item)
        if kind not in RESPONSES_ITEM_TYPES:
            raise ConversionError(
                f"Invalid value: '{item.get('type')}'. Not a Responses input item type"
                " (message, function_call, function_call_output, reasoning, …).",
                f"input.{i}.type",
            )


def to_transcript(
    fmt: str, messages: Any, *, open_calls: Sequence[tuple[str, str]] = ()
) -> tuple[list[dict[str, Any]], list[int]]:
    """(transcript message dicts, index of the native message each starts at).

    ``open_calls``: the session's unanswered calls (id, name), in order; a
    Gemini response without an id answers the oldest of its name.
    """
    if not isinstance(messages, list):
        raise NativeFormatError(fmt, "Input should be a valid list", "messages")
    try:
        if fmt == "anthropic":
            out = [_mark_string(m) for m in anthropic.messages_to_transcript(messages)]
            return out, _anthropic_starts(messages)
        if fmt == "openai":
            return openai_chat.messages_to_transcript(messages), list(range(len(messages)))
        if fmt == "responses":
            _check_items(messages)
            items = openai_responses.normalized_input({"input": messages})
            units = openai_responses.group_units(items)
            starts, at = [], 0
            for unit in units:
                starts.append(at)
                at += len(unit["items"])
            return openai_responses.units_to_transcript(units), starts
        if fmt == "gemini":
            converted = gemini.contents_to_transcript(messages, open_calls=open_calls)
            return converted, _gemini_starts(messages)
    except NativeFormatError:
        raise
    except ConversionError as exc:
        raise _renamed(fmt, exc) from None
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def from_transcript(fmt: str, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Transcript message dicts → the native list (the inverse of ``to_transcript``)."""
    if fmt == "anthropic":
        return anthropic.messages_from_transcript(list(messages))
    if fmt == "openai":
        return openai_chat.messages_from_transcript(list(messages))
    if fmt == "responses":
        return openai_responses.items_from_transcript(messages)
    if fmt == "gemini":
        return contents_from_transcript(messages)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
