"""The managed context as a Responses API body: sections as ``instructions``, the history as items.

``engine.build`` lays the context out (sections, history, tail) and hands the
parts here. Order as its ``openai`` format: the changing tail after the
history (a ``developer`` message), so the automatic prefix cache covers
everything before it. Stored items (reasoning with its ``encrypted_content``)
go back verbatim: the history is converted from each message's stored
content, with its meta, unless the message has a view (a trimmed output).

Each message is converted once per message object (``message_items``, kept
by ``history.memo``) and its items go into every build's list as they are: a
build copies no item, so at 2,000 items a call allocates nothing per item (and
with a session's ``HistoryMemo`` it looks up only the new messages). Whoever
changes an item replaces it in the body's list with a changed copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages import Message, ToolDef
from .history import memo
from .openai_responses import items_from_transcript
from .openai_responses_tools import tools_from_defs


def transcript_dict(msg: Message) -> dict[str, Any]:
    """A history message as the converters read it: stored content (with its meta) or its view."""
    out: dict[str, Any] = {
        "role": msg.role,
        "content": msg.content if msg.view is None else msg.context_text,
    }
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls
        ]
    if msg.tool_call_id is not None:
        out["tool_call_id"] = msg.tool_call_id
    return out


def _items(msg: Message) -> list[dict[str, Any]]:
    """One message's items (``items_from_transcript`` converts each message on its own)."""
    return items_from_transcript([transcript_dict(msg)])


def message_items(msg: Message) -> list[dict[str, Any]]:
    """One history message's items, converted once per message object (``history.memo``):
    the memo's items themselves, not copies."""
    return memo(msg, "responses", _items)


def responses_body(
    *,
    items: list[dict[str, Any]],
    system: list[str],
    tail: list[str],
    final_instruction: str | None,
    model: str,
    max_output_tokens: int,
    tools: Sequence[ToolDef],
) -> dict[str, Any]:
    """``items``: the history's (``message_items``, in a list of the caller's, which
    this extends): every later step changes an item by replacing it in the body's
    list, never in place."""
    system_texts = list(system)
    tail_text = "\n\n".join(tail)
    if tail_text and not items:
        system_texts.append(tail_text)
        tail_text = ""
    if tail_text:
        items.append({"role": "developer", "content": tail_text})
    if final_instruction:
        items.append({"role": "user", "content": final_instruction})
    body: dict[str, Any] = {"model": model, "max_output_tokens": max_output_tokens, "input": items}
    if system_texts:
        body["instructions"] = "\n\n".join(system_texts)
    if tools:
        body["tools"] = tools_from_defs(tools)
    return body
