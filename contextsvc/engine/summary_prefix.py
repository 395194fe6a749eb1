"""A summary call that re-reads the session's cached prefix instead of fresh input.

The request is the session's own context (system, tools, retain, summary,
live messages, as ``engine.build`` assembles them for the agent's calls) with
the summarise instruction appended as the last user message: the provider
serves everything before the instruction from its prompt cache, at a tenth of
the input price, as Claude Code's compaction request does. The tools stay
(the history holds tool blocks, and the cached prefix includes them) but the
model may not call one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from contextsvc.engine.build import ContextParts, build_request, sent_history
from contextsvc.engine.messages import Message


def kept_note(kept: int, after_memory: bool = False) -> str:
    """What the instruction adds: the newest messages stay verbatim, not summarised;
    with ``after_memory``, neither is the earlier summary at the top (it is kept
    and merged with the new one)."""
    notes = []
    if kept:
        notes.append(
            f"Summarise only what comes before the last {kept} messages above:"
            " those stay in the context verbatim."
        )
    if after_memory:
        notes.append(
            "The retained context and summary at the top are kept as they are:"
            " summarise only the messages after them."
        )
    return "".join(f"\n\n{n}" for n in notes)


def prefix_messages(prefix: ContextParts, prompt: str) -> list[Message]:
    """The context's messages as its calls send them (retain and summary first, made
    well formed), then the instruction."""
    return [*sent_history(prefix), Message(role="user", content=prompt)]


def prefix_body(
    fmt: str, prefix: ContextParts, prompt: str, model: str, max_tokens: int
) -> dict[str, Any]:
    """The provider body: the context's, the instruction last, no tool call allowed."""
    parts = replace(
        prefix,
        model=model,
        max_output_tokens=max_tokens,
        messages=[*prefix.messages, Message(role="user", content=prompt)],
        notes=(),
        final_instruction=None,
    )
    body = build_request(fmt, parts)
    if body.get("tools") and fmt == "gemini":
        body["toolConfig"] = {"functionCallingConfig": {"mode": "NONE"}}
    elif body.get("tools"):
        body["tool_choice"] = {"type": "none"} if fmt == "anthropic" else "none"
    return body
