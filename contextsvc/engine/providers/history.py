"""History messages for a build, rendered through the provider converters.

``engine.build`` assembles the request; for each history message it asks
here for the provider form. A message shown in full (no view) goes through
the same converter the proxy and ``POST /messages?format=`` read it with, so
an agent gets back what it posted: an Anthropic ``tool_result`` keeps its
block list and ``is_error``, a string stays a string, a tool call keeps its
extra keys; an OpenAI message keeps its ``name`` and argument text.

What a provider would refuse is still left out or converted: parts of the
other provider (``parts.anthropic_part`` / ``openai_part``), the Responses
API's own marks on text parts, whitespace-only text blocks, keys the
converter kept from an unknown message shape, and ``reasoning_content``
(DeepSeek and OpenAI refuse it as input). A message with a view (a cut or
trimmed output) sends the view's text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..messages import Message
from ..parts import anthropic_part, openai_part
from . import anthropic, openai_chat
from .common import META, arguments_to_text

NO_OUTPUT = "(no output)"
# Marks the Responses converter leaves on a text part; no provider takes them.
_PART_MARKS = (META, "responses_type")


T = TypeVar("T")


def memo(msg: Message, key: str, render: Callable[[Message], T]) -> T:
    """``render(msg)``, kept on ``msg`` under ``key`` (``Message.rendered``).

    The caller copies what it will change: the memo is shared by every build
    that gets this message object from the context cache.
    """
    kept = msg.rendered
    if kept is None:
        kept = msg.rendered = {}
    try:
        return kept[key]
    except KeyError:
        value = kept[key] = render(msg)
        return value


def transcript_dict(msg: Message) -> dict[str, Any]:
    """``msg`` as the converters read it (stored content with its meta, the build's ids)."""
    out: dict[str, Any] = {"role": msg.role, "content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls
        ]
    if msg.tool_call_id is not None:
        out["tool_call_id"] = msg.tool_call_id
    if msg.name is not None:
        out["name"] = msg.name
    return out


def _text_block(part: dict[str, Any]) -> dict[str, Any] | None:
    if not str(part.get("text") or "").strip():
        return None  # Anthropic rejects empty and whitespace-only text blocks
    return {k: v for k, v in part.items() if k not in _PART_MARKS}


def _anthropic_blocks(blocks: list[Any]) -> list[dict[str, Any]]:
    out = []
    for block in blocks:
        kind = block.get("type", "text")
        if kind == "text":
            kept = _text_block(block)
        elif kind == "tool_use":
            kept = block
        else:
            kept = anthropic_part(block)
        if kept is not None:
            out.append(kept)
    return out


def anthropic_content(msg: Message) -> tuple[list[dict[str, Any]], bool]:
    """``msg``'s Anthropic content blocks, and whether it was posted as one string.

    The second value lets the build give a string back when the message ends
    up alone in its turn, unmarked (the agent's own form). The rendering is
    done once per message object (``memo``). The list is new (the build merges
    turns into it); the blocks are the memo's, shared by every build of this
    message object: whoever changes one replaces it with a changed copy
    (``engine.build`` and the proxy mark and unmark only by replacing), so a
    build copies no block per message.
    """
    blocks, as_string = memo(msg, "anthropic", _anthropic_content)
    return list(blocks), as_string


def _anthropic_content(msg: Message) -> tuple[list[dict[str, Any]], bool]:
    if msg.view is not None:
        return _view_blocks(msg), False
    if _plain_text(msg):
        # What the converter gives a string without meta or calls, without the
        # round trip through it: most of a long history, built on every call.
        text = msg.content
        return ([{"type": "text", "text": text}] if text.strip() else []), False
    converted = anthropic.messages_from_transcript([transcript_dict(msg)])[0]["content"]
    if isinstance(converted, str):
        blocks = [{"type": "text", "text": converted}] if converted.strip() else []
        return blocks, _posted_as_string(msg)
    if msg.role != "tool":
        return _anthropic_blocks(converted), False
    result = dict(converted[0])
    content = result.get("content", "")
    if isinstance(content, list):
        content = _anthropic_blocks(content) or NO_OUTPUT
    if isinstance(content, str) and not content.strip():
        content = NO_OUTPUT
    result["content"] = content
    return [result], False


def _plain_text(msg: Message) -> bool:
    """A user or assistant string with no tool calls and no name: both converters
    pass it through unchanged (a string carries no meta)."""
    return (
        isinstance(msg.content, str)
        and msg.role in ("user", "assistant")
        and not msg.tool_calls
        and msg.name is None
    )


def _posted_as_string(msg: Message) -> bool:
    """Whether the content came in as a string that its provider's converter marked.

    A plain string posted in the service's own shape carries no mark and goes
    out as a text block, as it always has.
    """
    first = msg.content[0] if isinstance(msg.content, list) and msg.content else None
    return isinstance(first, dict) and bool((first.get(META) or {}).get("string"))


def _view_blocks(msg: Message) -> list[dict[str, Any]]:
    text = msg.context_text
    if msg.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": msg.tool_call_id,
                "content": text if text.strip() else NO_OUTPUT,
            }
        ]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
        for c in msg.tool_calls
    )
    return blocks


def openai_message(msg: Message) -> dict[str, Any]:
    """``msg`` as a Chat Completions message (a system one keeps a ``developer`` role).

    The message's one rendering itself (``memo``), not a copy: every build of the
    session shares it, so nothing changes it in place (a changed message replaces
    it in the body's list), and the body sent upstream copies its JSON from the
    previous call's (``proxy.upstream_json``).
    """
    return memo(msg, "openai", _openai_message)


def _openai_message(msg: Message) -> dict[str, Any]:
    if msg.view is not None:
        return _openai_view(msg)
    if _plain_text(msg):
        return {"role": msg.role, "content": msg.content}
    item = openai_chat.messages_from_transcript([transcript_dict(msg)])[0]
    out: dict[str, Any] = {"role": item["role"]}
    if msg.role == "tool":
        out["tool_call_id"] = item["tool_call_id"]
    content = item.get("content")
    if isinstance(content, list):
        parts = []
        for part in content:
            if part.get("type", "text") == "text":
                parts.append({"type": "text", "text": part.get("text", "")})
            elif (kept := openai_part(part, msg.role)) is not None:
                parts.append(kept)
        content = parts or ""
    out["content"] = content
    if item.get("tool_calls"):
        out["tool_calls"] = item["tool_calls"]
    if item.get("name") is not None and msg.role != "tool":
        out["name"] = item["name"]
    return out


def _openai_view(msg: Message) -> dict[str, Any]:
    if msg.role == "tool":
        return {"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.context_text}
    out: dict[str, Any] = {"role": msg.role, "content": msg.context_text}
    if msg.tool_calls:
        out["content"] = msg.context_text or None
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": arguments_to_text(c.arguments),
                },
            }
            for c in msg.tool_calls
        ]
    return out
