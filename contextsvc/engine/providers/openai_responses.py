"""OpenAI Responses API bodies to and from the transcript: input items, output items, streams.

One converter for the proxy's ``/responses`` route and the ``responses``
context format. Items group into transcript messages (*units*):

- a ``message`` item of role ``user`` is a user message; ``system`` /
  ``developer`` ones are prompt sections while they lead the input (as Chat
  Completions' leading system messages are) and a transcript ``system``
  message in its place afterwards (a ``developer`` one records its role); ``input_text`` / ``output_text`` parts are
  ``text`` parts (their other keys, ``annotations`` …, stay on the part);
  other parts (images, files) are kept verbatim;
- the items of one assistant turn — ``reasoning``, assistant ``message``\\ s,
  ``function_call`` / ``custom_tool_call`` and hosted-tool items
  (``web_search_call`` …) — are one assistant message: the calls are its
  ``tool_calls``, every other item a content part in item order. A
  ``reasoning`` item (with its ``encrypted_content``) is such a part, verbatim:
  never summarised, sent back with its turn, dropped only with it;
- ``function_call_output`` / ``custom_tool_call_output`` is a tool message;
- any other item (``item_reference``, ``compaction`` sent by the client …) is
  a user message holding the item as its one part.

The meta (``common``) keeps what the transcript has no field for: the item
layout of a turn (``items``), item keys such as ``id`` / ``status``, and a
part's non-default type. What comes back equals what went in, apart from the
spacing of argument JSON and views of long outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..messages import PromptSection
from .common import (
    ConversionError,
    Converted,
    arguments_from_text,
    arguments_to_text,
    attach_meta,
    take_meta,
)
from .openai_responses_tools import tools_to_defs

INSTRUCTION_ROLES = ("system", "developer")
CALL_TYPES = ("function_call", "custom_tool_call")
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")
# Items the model produces besides messages and calls: they belong to its turn.
TURN_ITEMS = (
    "reasoning",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
)
_TEXT_TYPES = ("input_text", "output_text", "text")
_MESSAGE_ROLES = ("user", "assistant", "system", "developer")
_ASSISTANT_TYPES = frozenset((*CALL_TYPES, *TURN_ITEMS))


def _kind(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def normalized_input(body: dict[str, Any], *, checked: int = 0) -> list[dict[str, Any]]:
    """The request's ``input`` as a list of items (a string is one user message); the
    first ``checked`` items, which an earlier call accepted, are not checked again."""
    value = body.get("input", [])
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise ConversionError("Invalid type for 'input': expected a string or an array.", "input")
    for i, item in enumerate(value[checked:], checked):
        if not isinstance(item, dict):
            raise ConversionError("Invalid type: expected an object.", f"input.{i}")
        kind = item.get("type")  # ``_kind``, inline: every item of every call
        message = kind == "message" or (kind is None and "role" in item)
        if message and item.get("role") not in _MESSAGE_ROLES:
            roles = "'assistant', 'system', 'developer', and 'user'"
            message = f"Invalid value: '{item.get('role')}'. Supported values are: {roles}."
            raise ConversionError(message, f"input.{i}.role")
    return value


def leading_instructions(items: Sequence[dict[str, Any]]) -> int:
    """How many leading items are system / developer messages (the prompt sections)."""
    lead = 0
    while (
        lead < len(items)
        and _kind(items[lead]) == "message"
        and items[lead].get("role") in INSTRUCTION_ROLES
    ):
        lead += 1
    return lead


def group_units(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items grouped one unit per transcript message: ``{"role", "items"}`` (module doc)."""
    units: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")  # ``_kind``, inline: every item of every call
        if kind is None and "role" in item:
            kind = "message"
        if kind == "message":
            assistant = item.get("role") == "assistant"
        else:
            assistant = isinstance(kind, str) and kind in _ASSISTANT_TYPES
        if assistant:
            if units and units[-1]["role"] == "assistant":
                units[-1]["items"].append(item)
            else:
                units.append({"role": "assistant", "items": [item]})
            continue
        role = "tool" if kind in OUTPUT_TYPES else str(item.get("role") or "user")
        units.append({"role": role, "items": [item]})
    return units


def request_to_transcript(
    body: dict[str, Any], *, messages: bool = True, items: list[dict[str, Any]] | None = None
) -> Converted:
    """Split a Responses request into transcript messages, sections, tools and the rest.

    ``messages=False`` leaves the conversation out (``Converted.messages`` empty).
    ``items``: ``normalized_input(body)``, when the caller has it already.
    """
    items = normalized_input(body) if items is None else items
    lead = leading_instructions(items)
    sections = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        sections.append(PromptSection(name="instructions", content=body["instructions"]))
    for i in range(lead):
        sections.append(
            PromptSection(name=f"{items[i]['role']}.{i}", content=_plain_text(items[i]))
        )
    tools, other_tools, extras = tools_to_defs(body.get("tools") or [])
    rest = {k: v for k, v in body.items() if k not in ("input", "tools", "instructions")}
    return Converted(
        messages=units_to_transcript(group_units(items[lead:]), offset=lead) if messages else [],
        sections=sections,
        tools=tools,
        other_tools=other_tools,
        tool_extras=extras,
        rest=rest,
    )


def _plain_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") in _TEXT_TYPES
        )
    raise ConversionError("Missing required parameter: 'content'.", "input.content")


# --- items → transcript ------------------------------------------------------------


def _parts_in(content: Any, path: str) -> tuple[Any, dict[str, Any]]:
    """Message content → transcript content, plus the meta its string form needs."""
    if isinstance(content, str):
        return content, {}
    if not isinstance(content, list):
        raise ConversionError("Invalid type: expected a string or an array.", f"{path}.content")
    parts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise ConversionError("Missing required parameter: 'type'.", f"{path}.content.{j}")
        if part["type"] in _TEXT_TYPES:
            if not isinstance(part.get("text"), str):
                raise ConversionError("Missing required parameter: 'text'.", f"{path}.content.{j}")
            rest = {k: v for k, v in part.items() if k != "type"}
            parts.append({"type": "text", **rest, "responses_type": part["type"]})
        else:
            parts.append(dict(part))
    return parts, {}


def _item_keys(item: dict[str, Any], known: set[str]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in known}


def units_to_transcript(
    units: Sequence[dict[str, Any]],
    *,
    offset: int = 0,
    expand: Callable[[dict[str, Any]], str | None] | None = None,
) -> list[dict[str, Any]]:
    """Units (``group_units``) → transcript message dicts; ``offset`` numbers the error paths.

    ``expand`` turns a ``compaction`` item into the text it stands for (the proxy's
    own tokens): stored and sent as a user message of that text (on purpose, not lossless).
    """
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    position = offset
    for unit in units:
        items = unit["items"]
        path = f"input.{position}"
        position += len(items)
        if unit["role"] == "assistant":
            message = _assistant_in(items, path)
            for call in message.get("tool_calls", ()):
                names[call["id"]] = call["name"]
            out.append(message)
            continue
        item = items[0]
        kind = _kind(item)
        if kind in OUTPUT_TYPES:
            out.append(_output_in(item, path, names))
        elif kind == "message":
            content, _ = _parts_in(item.get("content"), path)
            meta: dict[str, Any] = {}
            keys = _item_keys(item, {"role", "content"})
            if keys:
                meta["item"] = keys
            if item["role"] == "developer":
                meta["role"] = "developer"
            role = "system" if item["role"] in INSTRUCTION_ROLES else "user"
            out.append({"role": role, "content": attach_meta(content, meta)})
        elif kind == "compaction" and expand is not None and (text := expand(item)) is not None:
            out.append({"role": "user", "content": attach_meta(text, {"compaction": True})})
        else:
            out.append({"role": "user", "content": attach_meta([dict(item)], {"opaque": True})})
    return out


def _output_in(item: dict[str, Any], path: str, names: dict[str, str]) -> dict[str, Any]:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ConversionError("Missing required parameter: 'call_id'.", f"{path}.call_id")
    output = item.get("output")
    if isinstance(output, list):
        content, _ = _parts_in(output, path)
    elif isinstance(output, str):
        content = output
    else:
        raise ConversionError("Missing required parameter: 'output'.", f"{path}.output")
    keys = _item_keys(item, {"call_id", "output"})
    # The common case (a plain function_call_output) carries no meta: offloading sees a string.
    meta = {} if keys == {"type": "function_call_output"} else {"item": keys}
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": call_id,
        "content": attach_meta(content, meta),
    }
    if call_id in names:
        message["name"] = names[call_id]
    return message


def _assistant_in(items: Sequence[dict[str, Any]], path: str) -> dict[str, Any]:
    """One assistant turn's items → one transcript message (module doc)."""
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    layout: list[dict[str, Any]] = []
    for item in items:
        kind = _kind(item)
        if kind in CALL_TYPES:
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not isinstance(item.get("name"), str):
                raise ConversionError("Missing required parameter: 'call_id' or 'name'.", path)
            text = item.get("arguments") if kind == "function_call" else item.get("input")
            arguments = (
                arguments_from_text(text) if kind == "function_call" else {"_raw": text or ""}
            )
            calls.append({"id": call_id, "name": item["name"], "arguments": arguments})
            entry = {
                "call": call_id,
                "item": _item_keys(item, {"call_id", "name", "arguments", "input"}),
            }
            if kind == "function_call" and ("_value" in arguments or not isinstance(text, str)):
                entry["text"] = text
            elif kind == "function_call" and "_raw" in arguments:
                entry["text"] = text
            layout.append(entry)
        elif kind == "message":
            content, _ = _parts_in(item.get("content", ""), path)
            if isinstance(content, str):
                content = [{"type": "text", "text": content, "responses_type": "string"}]
            layout.append({"parts": len(content), "item": _item_keys(item, {"content"})})
            parts.extend(content)
        else:
            layout.append({"parts": 1, "opaque": True})
            parts.append(dict(item))
    message: dict[str, Any] = {
        "role": "assistant",
        "content": attach_meta(parts, {"items": layout}),
    }
    if calls:
        message["tool_calls"] = calls
    return message


# --- transcript → items ------------------------------------------------------------


def _parts_out(content: Any, role: str) -> Any:
    if isinstance(content, str):
        return content
    default = "output_text" if role == "assistant" else "input_text"
    out = []
    for part in content:
        if part.get("type") == "text":
            kind = part.get("responses_type") or default
            rest = {k: v for k, v in part.items() if k not in ("type", "responses_type")}
            out.append({"type": kind, **rest})
        else:
            out.append(part)
    return out


def items_from_transcript(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Transcript message dicts → Responses input items (the inverse of ``units_to_transcript``)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content, meta = take_meta(message.get("content", ""))
        role = message["role"]
        if role == "assistant":
            out.extend(_assistant_out(message, content, meta))
        elif role == "tool":
            item = dict(meta.get("item", {"type": "function_call_output"}))
            item["call_id"] = message["tool_call_id"]
            item["output"] = _parts_out(content, "tool")
            out.append(item)
        elif meta.get("opaque") and isinstance(content, list) and len(content) == 1:
            out.append(content[0])
        else:
            item = dict(meta.get("item", {}))
            item["role"] = meta.get("role", role)
            item["content"] = _parts_out(content, role)
            out.append(item)
    return out


def _assistant_out(
    message: dict[str, Any], content: Any, meta: dict[str, Any]
) -> list[dict[str, Any]]:
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    calls = {c["id"]: c for c in message.get("tool_calls") or ()}
    layout = meta.get("items")
    if layout is None:  # a message not written by this converter: text, other parts, then calls
        parts = [p for p in parts if p.get("type") != "text" or str(p.get("text") or "").strip()]
        layout = [{"parts": 1, "opaque": p.get("type") != "text"} for p in parts]
        layout.extend({"call": call_id} for call_id in calls)
    out: list[dict[str, Any]] = []
    cursor = 0
    for entry in layout:
        if "call" in entry:
            call = calls.pop(entry["call"], None)
            if call is not None:
                out.append(_call_out(call, entry))
            continue
        taken = parts[cursor : cursor + entry["parts"]]
        cursor += entry["parts"]
        if entry.get("opaque"):
            out.extend(taken)
            continue
        item = {"type": "message", "role": "assistant", **entry.get("item", {})}
        if len(taken) == 1 and taken[0].get("responses_type") == "string":
            item["content"] = taken[0]["text"]
        else:
            item["content"] = _parts_out(taken, "assistant")
        out.append(item)
    out.extend(_call_out(call, {}) for call in calls.values())  # calls the layout does not name
    return out


def _call_out(call: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    extra = dict(entry.get("item", {}))
    kind = extra.pop("type", "function_call")
    arguments = call.get("arguments") or {}
    if kind == "custom_tool_call":
        text = arguments.get("_raw", arguments_to_text(arguments))
        return {"type": kind, **extra, "call_id": call["id"], "name": call["name"], "input": text}
    text = entry["text"] if "text" in entry else arguments_to_text(arguments)
    return {"type": kind, **extra, "call_id": call["id"], "name": call["name"], "arguments": text}


def item_kind(item: dict[str, Any]) -> str:
    """An item's type (an easy message without ``type`` is a ``message``)."""
    return _kind(item)


def assistant_from_items(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One turn's output items as the assistant transcript message."""
    return _assistant_in(items, "output")
