"""OpenAI Chat Completions bodies to and from the transcript (requests, responses, tools).

Rules (see ``common`` for the meta carried on a text part):

- The leading ``system`` / ``developer`` messages are the prompt sections
  (``system.0``, ``developer.1`` … by position); their text parts are joined
  with newlines and their other keys (``name``) are not kept. A ``system`` /
  ``developer`` message after the conversation started is a transcript
  ``system`` message at its place (a ``developer`` one records its role in
  the meta).
- ``null`` is absent: SDKs dump unset optional fields as ``null``
  (``refusal``, ``audio``, ``function_call``), so those keys are dropped; an
  assistant message with ``tool_calls`` and no content comes back with
  ``content: null``.
- ``tool_calls`` become ``[{id, name, arguments}]`` with the arguments parsed
  (text that is not a JSON object is kept as ``ToolCallIn`` keeps it). The
  text comes back as ``json.dumps`` writes the value — the same JSON, not
  always the same spacing: the context build writes arguments that way
  anyway, and keeping the model's own text would turn nearly every
  tool-calling message's content into a part list just to carry it. JSON that
  is not an object (``[1, 2]``) keeps its text in the meta.
- A ``tool`` message is named after the call it answers; ``reasoning_content``
  (vLLM, DeepSeek) is the transcript's ``reasoning``; keys the converter does
  not know go into the meta and come back.

What comes back equals what went in apart from these documented changes:
``null`` keys, the spacing of argument JSON, the text parts of a leading system message (back as one
string), an absent ``parameters`` or ``description`` of a function tool
(back as an empty object schema / left out) and non-function tools listed
after the function tools.
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
    arguments_from_text,
    arguments_to_text,
    as_int,
    attach_meta,
    function_tool,
    take_meta,
    without_none,
)

INSTRUCTION_ROLES = ("system", "developer")
_KNOWN = {
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id"},
}


def request_to_transcript(body: dict[str, Any], *, messages: bool = True) -> Converted:
    """Split a Chat Completions request into transcript messages, sections, tools and the rest.

    ``messages=False`` leaves the conversation messages out (``Converted.messages`` empty).
    """
    with_messages = messages
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ConversionError("Missing required parameter: 'messages'.", "messages")
    lead = 0
    while lead < len(messages) and _role(messages[lead], lead) in INSTRUCTION_ROLES:
        lead += 1
    sections = [
        PromptSection(
            name=f"{messages[i]['role']}.{i}", content=_text(messages[i], f"messages.{i}")
        )
        for i in range(lead)
    ]
    tools, other_tools, extras = tools_to_defs(body.get("tools") or [])
    return Converted(
        messages=messages_to_transcript(messages[lead:], offset=lead) if with_messages else [],
        sections=sections,
        tools=tools,
        other_tools=other_tools,
        tool_extras=extras,
        rest={k: v for k, v in body.items() if k not in ("messages", "tools")},
    )


def request_from_transcript(converted: Converted) -> dict[str, Any]:
    """The request again: the inverse of ``request_to_transcript`` (module doc: what differs)."""
    body = dict(converted.rest)
    body["messages"] = [
        *sections_to_messages(converted.sections),
        *messages_from_transcript(converted.messages),
    ]
    if converted.tools or converted.other_tools:
        body["tools"] = tools_from_defs(
            converted.tools, converted.other_tools, converted.tool_extras
        )
    return body


def sections_to_messages(sections: list[PromptSection]) -> list[dict[str, Any]]:
    out = []
    for section in sections:
        role = section.name.partition(".")[0]
        out.append(
            {"role": role if role in INSTRUCTION_ROLES else "system", "content": section.content}
        )
    return out


def _role(message: Any, i: int) -> str:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ConversionError("Missing required parameter: 'role'.", f"messages.{i}.role")
    return message["role"]


def _text(message: dict[str, Any], path: str) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    raise ConversionError("Missing required parameter: 'content'.", f"{path}.content")


# --- tools ----------------------------------------------------------------------


def tools_to_defs(
    tools: list[dict[str, Any]],
) -> tuple[list[ToolDef], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(function tools, other tools verbatim, extra keys per function tool)."""
    defs: list[ToolDef] = []
    others: list[dict[str, Any]] = []
    extras: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ConversionError("Invalid type: expected an object.", f"tools.{i}")
        function = tool.get("function")
        if tool.get("type") != "function":
            others.append(tool)
            continue
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ConversionError(
                f"Missing required parameter: 'tools[{i}].function.name'.", f"tools.{i}"
            )
        name = function["name"]
        defs.append(function_tool(name, function.get("description"), function.get("parameters")))
        extra = {
            k: v for k, v in function.items() if k not in ("name", "description", "parameters")
        }
        tool_extra = {k: v for k, v in tool.items() if k not in ("type", "function")}
        if extra or tool_extra:
            extras[name] = {"function": extra, "tool": tool_extra}
    return defs, others, extras


def tools_from_defs(
    defs: Sequence[ToolDef],
    other_tools: Sequence[dict[str, Any]] = (),
    tool_extras: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in defs:
        extra = (tool_extras or {}).get(tool.name, {})
        function: dict[str, Any] = {"name": tool.name}
        if tool.description:
            function["description"] = tool.description
        function["parameters"] = tool.input_schema
        function.update(extra.get("function", {}))
        out.append({"type": "function", "function": function, **extra.get("tool", {})})
    out.extend(other_tools)
    return out


# --- messages -------------------------------------------------------------------


def _content(message: dict[str, Any], path: str) -> str | list[dict[str, Any]]:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ConversionError("Invalid type: expected a string or an array.", f"{path}.content")
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise ConversionError("Missing required parameter: 'type'.", f"{path}.content.{j}")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise ConversionError("Missing required parameter: 'text'.", f"{path}.content.{j}")
    return content


def messages_to_transcript(
    messages: list[dict[str, Any]], *, offset: int = 0
) -> list[dict[str, Any]]:
    """Chat messages (after the leading instructions) → transcript message dicts."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool-call id → function name, for the tool messages
    for k, raw in enumerate(messages):
        i = k + offset
        path = f"messages.{i}"
        role = _role(raw, i)
        message = without_none(raw)
        content = _content(message, path)
        if role in INSTRUCTION_ROLES:
            meta = {"role": role} if role == "developer" else {}
            meta.update(_extra(message, {"role", "content"}))
            out.append({"role": "system", "content": attach_meta(content, meta)})
            continue
        if role not in _KNOWN:
            raise ConversionError(
                f"Invalid value: '{role}'. Supported values are: 'system', 'developer',"
                " 'user', 'assistant', 'tool'.",
                f"{path}.role",
            )
        meta = _extra(message, _KNOWN[role])
        item: dict[str, Any] = {"role": role}
        if role == "assistant":
            item.update(_assistant(message, meta, path))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ConversionError(
                    "Missing required parameter: 'tool_call_id'.", f"{path}.tool_call_id"
                )
            item["tool_call_id"] = call_id
            if call_id in names:
                item["name"] = names[call_id]
        if role == "user" and isinstance(message.get("name"), str):
            item["name"] = message["name"]
        if role != "assistant":
            item["content"] = attach_meta(content, meta)
        for call in item.get("tool_calls", ()):
            names[call["id"]] = call["name"]
        out.append(item)
    return out


def _extra(message: dict[str, Any], known: set[str]) -> dict[str, Any]:
    extra = {k: v for k, v in message.items() if k not in known}
    return {"message": extra} if extra else {}


def _assistant(message: dict[str, Any], meta: dict[str, Any], path: str) -> dict[str, Any]:
    """The fields of an assistant transcript message (content with its meta, calls, reasoning)."""
    out: dict[str, Any] = {}
    calls = []
    texts: dict[str, str] = {}
    for c, call in enumerate(message.get("tool_calls") or ()):
        where = f"{path}.tool_calls.{c}"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type", "function") != "function":
            raise ConversionError("Only function tool calls are supported.", where)
        if not isinstance(call.get("id"), str) or not isinstance(function.get("name"), str):
            raise ConversionError("Missing required parameter: 'id' or 'function.name'.", where)
        text = function.get("arguments", "")
        arguments = arguments_from_text(text)
        calls.append({"id": call["id"], "name": function["name"], "arguments": arguments})
        if not isinstance(text, str) or "_value" in arguments:
            texts[call["id"]] = text
    meta = dict(meta)
    if texts:
        meta["arguments"] = texts
    content = _content(message, path)
    if calls and message.get("content") == "":
        meta["empty_content"] = True
    out["content"] = attach_meta(content, meta)
    if calls:
        out["tool_calls"] = calls
    if isinstance(message.get("reasoning_content"), str):
        out["reasoning"] = message["reasoning_content"]
    if isinstance(message.get("name"), str):
        out["name"] = message["name"]
    return out


def messages_from_transcript(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Transcript message dicts → Chat Completions messages (module doc: the rules)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content, meta = take_meta(message.get("content", ""))
        role = message["role"]
        item: dict[str, Any] = {"role": meta.get("role", role)}
        if role == "tool":
            item["tool_call_id"] = message["tool_call_id"]
            item["content"] = content
        elif role == "assistant":
            calls = message.get("tool_calls") or ()
            item["content"] = (
                None if calls and content == "" and "empty_content" not in meta else content
            )
            if calls:
                texts = meta.get("arguments", {})
                item["tool_calls"] = [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": texts.get(call["id"])
                            if call["id"] in texts
                            else arguments_to_text(call.get("arguments", {})),
                        },
                    }
                    for call in calls
                ]
            if message.get("reasoning") is not None:
                item["reasoning_content"] = message["reasoning"]
        else:
            item["content"] = content
        if role != "tool" and message.get("name") is not None:
            item["name"] = message["name"]
        item.update(meta.get("message", {}))
        out.append(item)
    return out


# --- responses -------------------------------------------------------------------


def usage_from_openai(usage: dict[str, Any] | None) -> Usage:
    """Chat usage in the service's terms: cached prompt tokens are cache reads, not input."""
    usage = usage or {}
    prompt = as_int(usage.get("prompt_tokens"))
    cached = as_int((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=as_int(usage.get("completion_tokens")),
        cache_read_tokens=min(cached, prompt),
    )


def assistant_from_choice(message: dict[str, Any]) -> dict[str, Any]:
    """A response's ``choices[i].message`` as a transcript message.

    Response-only fields (``annotations``, ``audio``, ``logprobs``) are not part
    of the message the client sends back and are left out; a refusal becomes a
    ``refusal`` content part, as the request format writes it.
    """
    kept = {
        k: message[k]
        for k in ("content", "tool_calls", "reasoning_content")
        if message.get(k) is not None
    }
    if isinstance(message.get("refusal"), str):
        text = kept.pop("content", None)
        kept["content"] = [
            *([{"type": "text", "text": text}] if text else []),
            {"type": "refusal", "refusal": message["refusal"]},
        ]
    return {"role": "assistant", **_assistant(kept, {}, "message")}


def reply_from_response(response: dict[str, Any]) -> Reply:
    """A non-streaming ``chat.completion`` → the first choice's assistant message + usage."""
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ConversionError("Field required", "choices")
    return Reply(
        message=assistant_from_choice(choices[0].get("message") or {}),
        usage=usage_from_openai(response.get("usage")),
        stop_reason=choices[0].get("finish_reason"),
        id=response.get("id"),
        model=response.get("model"),
    )
