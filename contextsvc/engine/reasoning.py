"""Reasoning sent back to the provider: the current turn's always, older turns' optionally.

Anthropic requires the assistant turn of a tool loop in progress (with
extended thinking on) to start with its thinking block, signature intact, so
the current turn's blocks go back exactly as stored. Older turns' thinking is
the model's scratch work: Anthropic's ``clear_thinking`` context edit keeps
only the newest N thinking turns, and most models ignore it anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .messages import Message

REASONING_PARTS = frozenset({"thinking", "redacted_thinking"})


def drop_old_reasoning(messages: Sequence[Message], keep_turns: int | None) -> Sequence[Message]:
    """The history with the reasoning of turns older than the newest ``keep_turns`` left out.

    A turn starts at a user message. The current turn (the newest) always
    keeps its reasoning: Anthropic requires the assistant turn of a tool loop
    in progress to start with its thinking block, signature intact, and the
    blocks go back exactly as stored. Older turns' thinking may be dropped (as
    Anthropic's ``clear_thinking`` context edit does, keeping N thinking
    turns): it is the model's scratch work, and the API ignores it on most
    models anyway. None keeps every turn's (a prefix that never changes).
    """
    if keep_turns is None:
        return messages
    keep_turns = max(1, keep_turns)
    starts = [i for i, m in enumerate(messages) if m.role == "user"]
    if len(starts) <= keep_turns:
        return messages
    cutoff = starts[-keep_turns]
    out = list(messages)
    for i in range(cutoff):
        msg = out[i]
        if msg.role != "assistant":
            continue
        content = msg.content
        has_parts = isinstance(content, list) and any(
            p.get("type") in REASONING_PARTS for p in content
        )
        if not has_parts and not msg.reasoning:
            continue
        if has_parts:
            content = [p for p in content if p.get("type") not in REASONING_PARTS]
        out[i] = replace(msg, content=content, reasoning=None)
    return out
