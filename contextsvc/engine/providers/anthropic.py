"""Anthropic Messages bodies to and from the transcript (requests, responses, tools, system).

Rules (see ``common`` for the meta carried on a text part):

- ``system``: a string is one section named ``system``; text blocks are
  sections ``system.0`` … in order. A block is cacheable when it or a later
  block carries ``cache_control`` (it lies in the prefix the client caches);
  with no marker at all every section is cacheable and the service plans the
  breakpoints (docs/concepts/caching.md#breakpoints).
- ``cache_control`` is the client's caching hint, not content: it is dropped
  from every block on the way in, because the service places its own
  breakpoints (at most 4 per request).
- A user message's ``tool_result`` blocks come first (the API's rule; a
  result after other content is a ``ConversionError``) and become one ``tool``
  message each, in order, named after their ``tool_use``; ``is_error`` goes
  into the meta; the rest of the message becomes a user message after them.
  On the way back a run of ``tool`` messages and a following user message with
  block content are one user message again, results first.
- An assistant message's ``tool_use`` blocks become ``tool_calls``; every
  other block (text, thinking with its signature, redacted thinking, server
  tool blocks) stays a content part in its order. The way back puts the
  ``tool_use`` blocks after the other blocks, the order the model emits.
- A ``system`` role inside ``messages`` (a mid-conversation system message:
  Claude Code sends one) is a transcript ``system`` message at its place.
- ``reasoning`` without a signature (posted through the REST API or from an
  OpenAI-compatible model) has no Anthropic form and is left out on the way
  back.

What comes back equals what went in apart from these documented changes:
``cache_control`` markers, an absent or empty ``description`` of a tool, an
absent ``content`` of a ``tool_result`` (back as ``""``) and the block order
of an assistant message with text after a ``tool_use``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages import PromptSection, ToolDef
from .common import (
    ConversionError,
    Converted,
    Reply,
    Usage,
    as_int,
    attach_meta,
    client_tool_category,
    take_meta,
)

MANAGED_FIELDS = ("system", "messages", "tools")
_RESULT_KEYS = {"type", "tool_use_id", "content", "is_error", "cache_control"}
_USE_KEYS = {"type", "id", "name", "input", "cache_control"}
_TOOL_KEYS = {"name", "description", "input_schema", "cache_control"}


def request_to_transcript(body: dict[str, Any], *, messages: bool = True) -> Converted:
    """Split a Messages request into transcript messages, sections, tools and the rest.

    ``messages=False`` leaves the messages out (``Converted.messages`` empty):
    the proxy converts only the ones its session does not hold yet.
    """
    if not isinstance(body.get("messages"), list):
        raise ConversionError("Field required", "messages")
    tools, other_tools, extras = tools_to_defs(body.get("tools") or [])
    return Converted(
        messages=messages_to_transcript(body["messages"]) if messages else [],
        sections=system_to_sections(body.get("system")),
        tools=tools,
        other_tools=other_tools,
        tool_extras=extras,
        rest={k: v for k, v in body.items() if k not in MANAGED_FIELDS},
    )


def request_from_transcript(converted: Converted) -> dict[str, Any]:
    """The request again: the inverse of ``request_to_transcript`` (module doc: what differs)."""
    body = dict(converted.rest)
    system = sections_to_system(converted.sections)
    if system is not None:
        body["system"] = system
    body["messages"] = messages_from_transcript(converted.messages)
    if converted.tools or converted.other_tools:
        body["tools"] = tools_from_defs(
            converted.tools, converted.other_tools, converted.tool_extras
        )
    return body


# --- system -------------------------------------------------------------------


def system_to_sections(system: Any) -> list[PromptSection]:
    if system is None:
        return []
    if isinstance(system, str):
        return [PromptSection(name="system", content=system)]
    if not isinstance(system, list):
        raise ConversionError("Input should be a valid string or list of text blocks", "system")
    marked = [i for i, b in enumerate(system) if isinstance(b, dict) and b.get("cache_control")]
    last = marked[-1] if marked else len(system)
    sections = []
    for i, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise ConversionError("system blocks must be text blocks", f"system.{i}")
        if not isinstance(block.get("text"), str):
            raise ConversionError("Field required", f"system.{i}.text")
        sections.append(
            PromptSection(name=f"system.{i}", content=block["text"], cacheable=i <= last)
        )
    return sections


def sections_to_system(sections: list[PromptSection]) -> str | list[dict[str, Any]] | None:
    if not sections:
        return None
    if len(sections) == 1 and sections[0].name == "system":
        return sections[0].content
    return [{"type": "text", "text": s.content} for s in sections]


# --- tools ----------------------------------------------------------------------


def tools_to_defs(
    tools: list[dict[str, Any]],
) -> tuple[list[ToolDef], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(client tools, server tools verbatim, extra keys per client tool)."""
    defs: list[ToolDef] = []
    others: list[dict[str, Any]] = []
    extras: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise ConversionError("Field required", f"tools.{i}.name")
        clean = {k: v for k, v in tool.items() if k != "cache_control"}
        if tool.get("type", "custom") != "custom" or "input_schema" not in tool:
            others.append(clean)
            continue
        defs.append(
            ToolDef(
                name=tool["name"],
                description=tool.get("description") or "",
                input_schema=tool["input_schema"],
                category=client_tool_category(tool["name"]),
            )
        )
        extra = {k: v for k, v in clean.items() if k not in _TOOL_KEYS}
        if extra:
            extras[tool["name"]] = extra
    return defs, others, extras


def tools_from_defs(
    defs: Sequence[ToolDef],
    other_tools: Sequence[dict[str, Any]] = (),
    tool_extras: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in defs:
        item: dict[str, Any] = {"name": tool.name}
        if tool.description:
            item["description"] = tool.description
        item["input_schema"] = tool.input_schema
        item.update((tool_extras or {}).get(tool.name, {}))
        out.append(item)
    out.extend(dict(t) for t in other_tools)
    return out


# --- messages -------------------------------------------------------------------


def _blocks(content: list[Any], path: str) -> list[dict[str, Any]]:
    out = []
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise ConversionError("Input should be a content block with a type", f"{path}.{j}")
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise ConversionError("Field required", f"{path}.{j}.text")
        out.append(
            {k: v for k, v in block.items() if k != "cache_control"}
            if "cache_control" in block
            else block
        )
    return out


def _extra(message: dict[str, Any]) -> dict[str, Any]:
    """Message-level keys other than role and content, for the meta."""
    extra = {k: v for k, v in message.items() if k not in ("role", "content")}
    return {"message": extra} if extra else {}


def messages_to_transcript(
    messages: list[dict[str, Any]], *, offset: int = 0
) -> list[dict[str, Any]]:
    """Anthropic messages → transcript message dicts (module doc: the rules).

    ``offset``: the index of the first of ``messages`` in the request (error paths).
    """
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool_use id → tool name, for the tool messages
    for i, message in enumerate(messages, offset):
        path = f"messages.{i}"
        if not isinstance(message, dict):
            raise ConversionError("Input should be an object", path)
        role = message.get("role")
        content = message.get("content")
        if not isinstance(content, (str, list)):
            raise ConversionError("Input should be a valid string or list", f"{path}.content")
        blocks = content if isinstance(content, str) else _blocks(content, f"{path}.content")
        meta = _extra(message)
        if role == "assistant":
            out.append(assistant_to_transcript(blocks, meta=meta, path=path))
            for call in out[-1].get("tool_calls", ()):
                names[call["id"]] = call["name"]
        elif role == "system":
            out.append({"role": "system", "content": attach_meta(blocks, meta)})
        elif role == "user":
            out.extend(_user_to_transcript(blocks, meta, names, path))
        else:
            raise ConversionError("Input should be 'user', 'assistant' or 'system'", f"{path}.role")
    return out


def _user_to_transcript(
    blocks: str | list[dict[str, Any]],
    meta: dict[str, Any],
    names: dict[str, str],
    path: str,
) -> list[dict[str, Any]]:
    if isinstance(blocks, str):
        return [{"role": "user", "content": attach_meta(blocks, meta)}]
    out: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        kind = block["type"]
        if kind == "tool_use":
            raise ConversionError(
                "tool_use blocks are only allowed in assistant messages", f"{path}.content.{j}"
            )
        if kind != "tool_result":
            rest.append(block)
            continue
        if rest:
            raise ConversionError(
                "`tool_result` blocks must come first in a user message, before any other content",
                f"{path}.content.{j}",
            )
        use_id = block.get("tool_use_id")
        if not isinstance(use_id, str) or not use_id:
            raise ConversionError("Field required", f"{path}.content.{j}.tool_use_id")
        result = block.get("content", "")
        if isinstance(result, list):
            result = _blocks(result, f"{path}.content.{j}.content")
        elif not isinstance(result, str):
            raise ConversionError(
                "Input should be a valid string or list", f"{path}.content.{j}.content"
            )
        result_meta: dict[str, Any] = {}
        if block.get("is_error"):
            result_meta["is_error"] = True
        extra = {k: v for k, v in block.items() if k not in _RESULT_KEYS}
        if extra:
            result_meta["extra"] = extra
        tool: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": use_id,
            "content": attach_meta(result, result_meta),
        }
        if use_id in names:
            tool["name"] = names[use_id]
        out.append(tool)
    if rest or not out:
        out.append({"role": "user", "content": rest})
    if meta:
        out[0]["content"] = attach_meta(out[0]["content"], meta)
    return out


def assistant_to_transcript(
    blocks: str | list[dict[str, Any]], *, meta: dict[str, Any] | None = None, path: str = "content"
) -> dict[str, Any]:
    """An assistant message's content (request or response) as a transcript message."""
    meta = dict(meta or {})
    if isinstance(blocks, str):
        return {"role": "assistant", "content": attach_meta(blocks, meta)}
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    call_extra: dict[str, dict[str, Any]] = {}
    for j, block in enumerate(blocks):
        kind = block["type"]
        if kind == "tool_result":
            raise ConversionError(
                "tool_result blocks are only allowed in user messages", f"{path}.content.{j}"
            )
        if kind != "tool_use":
            parts.append(block)
            continue
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            raise ConversionError("Field required", f"{path}.content.{j}.id")
        arguments = block.get("input", {})
        calls.append({"id": block["id"], "name": block["name"], "arguments": arguments})
        extra = {k: v for k, v in block.items() if k not in _USE_KEYS}
        if extra:
            call_extra[block["id"]] = extra
    if call_extra:
        meta["call_extra"] = call_extra
    out: dict[str, Any] = {"role": "assistant", "content": attach_meta(parts, meta)}
    if calls:
        out["tool_calls"] = calls
    return out


def messages_from_transcript(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Transcript message dicts → Anthropic messages (module doc: the rules)."""
    out: list[dict[str, Any]] = []
    open_results = False  # the last output message holds only tool results so far
    for message in messages:
        content, meta = take_meta(message.get("content", ""))
        role = message["role"]
        if role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": content,
            }
            if meta.get("is_error"):
                block["is_error"] = True
            block.update(meta.get("extra", {}))
            if not open_results:
                out.append({"role": "user", "content": []})
                open_results = True
            out[-1]["content"].append(block)
            out[-1].update(meta.get("message", {}))
            continue
        if role == "user" and open_results and isinstance(content, list) and "role" not in meta:
            out[-1]["content"].extend(content)
            out[-1].update(meta.get("message", {}))
            open_results = False
            continue
        open_results = False
        if role == "assistant":
            content = _assistant_content(content, message.get("tool_calls") or (), meta)
        item: dict[str, Any] = {"role": meta.get("role", role), "content": content}
        item.update(meta.get("message", {}))
        out.append(item)
    return out


def _assistant_content(
    content: str | list[dict[str, Any]], calls: Any, meta: dict[str, Any]
) -> str | list[dict[str, Any]]:
    if not calls:
        return content
    blocks = list(content) if isinstance(content, list) else []
    if isinstance(content, str) and content:
        blocks.append({"type": "text", "text": content})
    extra = meta.get("call_extra", {})
    for call in calls:
        block = {"type": "tool_use", "id": call["id"], "name": call["name"]}
        block["input"] = call.get("arguments", {})
        block.update(extra.get(call["id"], {}))
        blocks.append(block)
    return blocks


# --- responses -------------------------------------------------------------------


def usage_from_anthropic(usage: dict[str, Any] | None) -> Usage:
    usage = usage or {}
    return Usage(
        input_tokens=as_int(usage.get("input_tokens")),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_creation_tokens=as_int(usage.get("cache_creation_input_tokens")),
        cache_read_tokens=as_int(usage.get("cache_read_input_tokens")),
    )


def reply_from_response(response: dict[str, Any]) -> Reply:
    """A non-streaming Messages response (``type: message``) → the assistant message + usage."""
    content = response.get("content")
    if not isinstance(content, list):
        raise ConversionError("Field required", "content")
    return Reply(
        message=assistant_to_transcript(_blocks(content, "content")),
        usage=usage_from_anthropic(response.get("usage")),
        stop_reason=response.get("stop_reason"),
        id=response.get("id"),
        model=response.get("model"),
    )
