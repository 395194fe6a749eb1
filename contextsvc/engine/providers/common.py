"""What every provider converter shares: the conversion result, usage, errors and the meta rule.

Transcript messages are plain dicts in the REST API's ``MessageIn`` shape
(``sessions/schemas.py``): ``role`` user / assistant / tool, ``content`` (text
or a list of typed parts), ``tool_calls`` ``[{id, name, arguments}]``,
``tool_call_id``, ``name``, ``reasoning``. What that shape cannot hold is kept
so the way back is lossless:

- a provider block the transcript has no field for (images, documents,
  thinking with its signature, redacted thinking, server tool blocks,
  refusals) stays a content part, verbatim (``Message.content`` allows any
  typed dict);
- a fact about the message itself (its provider role was ``system``, a
  tool result was an error, content was a string, a tool call's argument text,
  keys the converter does not know) goes into the *meta*: the dict under
  ``META`` on the message's first text part. Every reader of content ignores
  the keys of a text part other than ``type`` and ``text`` (token counting,
  the context build), so the meta costs no tokens and is never sent upstream.
  When such a message has string content, it becomes one text part carrying
  the meta (``string: true`` turns it back into a string); when it has no
  text part, an empty one is put first (``inserted: true`` removes it).

Meta keys: ``string``, ``inserted`` (above); ``role`` (a ``system`` /
``developer`` message kept in place as a user message); ``message`` (keys of
the provider message the converter does not know); ``is_error`` and
``extra`` (an Anthropic ``tool_result``'s flag and unknown keys);
``call_extra`` (unknown keys of Anthropic ``tool_use`` blocks, by id);
``arguments`` (an OpenAI call's argument text that is not a JSON object, by
id); ``empty_content`` (an OpenAI assistant message with tool calls and
``""`` rather than ``null`` content); ``gemini_*`` (``providers.gemini``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages import PromptSection, ToolDef

META = "provider_meta"


class ConversionError(ValueError):
    """A body the provider itself would reject; ``path`` names the field (``messages.2.content.0``)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.message = message
        self.path = path


@dataclass(slots=True)
class Usage:
    """Provider-reported usage in the service's terms (``POST /usage``).

    ``input_tokens`` excludes cached input, as Anthropic reports it
    (docs/concepts/context-build.md#usage-total: total = input + cache creation + cache read +
    output); an OpenAI ``prompt_tokens`` is split into its cached part and the rest.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_tokens": self.cache_creation_tokens,
            "cache_read_tokens": self.cache_read_tokens,
        }


@dataclass(slots=True)
class Converted:
    """A provider request split into what the service manages and what passes through.

    ``other_tools`` are tools that are not plain function tools (server tools
    such as web search): forwarded unchanged. ``tool_extras`` holds, per tool
    name, the keys of a function tool that ``ToolDef`` has no field for
    (``strict``, ``defer_loading`` …). ``rest`` is every other top-level field
    (``model``, ``max_tokens``, ``stream``, ``tool_choice``, ``thinking`` …).
    """

    messages: list[dict[str, Any]]
    sections: list[PromptSection] = field(default_factory=list)
    tools: list[ToolDef] = field(default_factory=list)
    other_tools: list[dict[str, Any]] = field(default_factory=list)
    tool_extras: dict[str, dict[str, Any]] = field(default_factory=dict)
    rest: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Reply:
    """An upstream answer: the assistant transcript message and the usage.

    ``incomplete`` marks a stream that ended before its final event (a client
    or upstream disconnect); ``error`` is the provider's error object when the
    stream carried one.
    """

    message: dict[str, Any]
    usage: Usage
    stop_reason: str | None = None
    id: str | None = None
    model: str | None = None
    incomplete: bool = False
    error: dict[str, Any] | None = None


def as_int(value: Any) -> int:
    """A usage figure: ``None`` and anything not a non-negative int count as 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def attach_meta(content: str | list[dict[str, Any]], meta: dict[str, Any]) -> Any:
    """``content`` with ``meta`` on its first text part (see the module doc); unchanged if empty."""
    if not meta:
        return content
    if isinstance(content, str):
        return [{"type": "text", "text": content, META: {**meta, "string": True}}]
    parts = list(content)
    for i, part in enumerate(parts):
        if part.get("type") == "text":
            parts[i] = {**part, META: meta}
            return parts
    return [{"type": "text", "text": "", META: {**meta, "inserted": True}}, *parts]


def take_meta(content: Any) -> tuple[Any, dict[str, Any]]:
    """The inverse of ``attach_meta``: (content as it was, meta)."""
    if not isinstance(content, list):
        return content, {}
    for i, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "text" and META in part:
            meta = dict(part[META])
            if meta.pop("inserted", False):
                return content[:i] + content[i + 1 :], meta
            clean = {k: v for k, v in part.items() if k != META}
            if meta.pop("string", False) and len(content) == 1:
                return clean["text"], meta
            return [*content[:i], clean, *content[i + 1 :]], meta
    return content, {}


# Meta keys that hold one entry per tool call, by the call's id.
_BY_CALL_ID = ("call_extra", "arguments", "gemini_calls")


def rename_call_meta(content: Any, renames: Sequence[tuple[str, str]]) -> Any:
    """``content`` with its meta's per-call entries following renamed calls.

    ``renames``: (posted id, id in the request) of each call of the message, in
    order. The build renames a reused id (``engine.wellformed``); without this
    a call would lose what the meta keeps for it (an Anthropic block's extra
    keys, an OpenAI argument text, its place and item type in a Responses
    turn). ``content`` is not changed (the context cache shares it): the meta
    part is copied.
    """
    if not isinstance(content, list):
        return content
    for i, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "text" and META in part:
            meta = dict(part[META])
            for key in _BY_CALL_ID:
                if isinstance(meta.get(key), dict):
                    meta[key] = _rekeyed(meta[key], renames)
            if isinstance(meta.get("items"), list):
                meta["items"] = _relaid(meta["items"], renames)
            return [*content[:i], {**part, META: meta}, *content[i + 1 :]]
    return content


def _rekeyed(by_id: dict[str, Any], renames: Sequence[tuple[str, str]]) -> dict[str, Any]:
    posted = {old for old, _ in renames}
    out = {k: v for k, v in by_id.items() if k not in posted}
    out.update({new: by_id[old] for old, new in renames if old in by_id})
    return out


def _relaid(layout: list[Any], renames: Sequence[tuple[str, str]]) -> list[Any]:
    """A Responses layout's call entries renamed in call order (an id may repeat)."""
    pending: dict[str, list[str]] = {}
    for old, new in renames:
        pending.setdefault(old, []).append(new)
    out = []
    for entry in layout:
        news = pending.get(entry.get("call")) if isinstance(entry, dict) else None
        out.append({**entry, "call": news.pop(0)} if news else entry)
    return out


def arguments_from_text(text: Any) -> dict[str, Any]:
    """Tool-call arguments from JSON text, as ``ToolCallIn`` reads them.

    Text that is not JSON is kept as ``{"_raw": text}``, JSON that is not an
    object as ``{"_value": value}``.
    """
    if isinstance(text, dict):
        return text
    if not isinstance(text, str):
        return {"_value": text}
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_value": value}


def arguments_to_text(arguments: dict[str, Any]) -> str:
    """The JSON text the context build sends for a call's arguments."""
    if set(arguments) == {"_raw"} and isinstance(arguments["_raw"], str):
        return arguments["_raw"]
    return json.dumps(arguments, ensure_ascii=False)


def without_none(value: dict[str, Any]) -> dict[str, Any]:
    """A dict without its ``None`` values: SDKs dump unset optional fields as null."""
    return {k: v for k, v in value.items() if v is not None}


def client_tool_category(name: str) -> str:
    """The category of a tool the client defines: ``mcp`` for an MCP server's tool, named
    ``mcp__<server>__<tool>``; ``client`` for the agent's own (Bash, Read, …).

    The service's own tools never come from the client: the proxy registers them
    as ``builtin`` beside these.
    """
    server, _, tool = name.removeprefix("mcp__").partition("__")
    return "mcp" if name.startswith("mcp__") and server and tool else "client"


def function_tool(name: str, description: Any, parameters: Any) -> ToolDef:
    """An OpenAI function tool (Chat Completions or Responses) as the service's ``ToolDef``.

    An absent schema is the empty object schema (the APIs accept a function
    without ``parameters``).
    """
    return ToolDef(
        name=name,
        description=description or "",
        input_schema=parameters or {"type": "object", "properties": {}},
        category=client_tool_category(name),
    )
