"""History messages as Anthropic turns: the one place they are merged and placed.

``engine.build`` adds each message of a well-formed history (``engine.wellformed``)
with ``add_turn``, then ends the list with ``strip_prefill`` and ``restore_strings``;
``engine.native_export`` does the same over a whole transcript, a piece at a time.

Tool results and user text are both ``user`` turns for Anthropic; consecutive
same-role turns are merged, so the list strictly alternates. A history
``system`` message (an instruction the client placed mid-conversation) stays a
``system`` message when the model takes one (``mid_system``) and it follows a
user turn, the only place the Messages API accepts it; otherwise it becomes
user text opened by ``SYSTEM_REMINDER_HEADER``.
"""

from __future__ import annotations

from typing import Any

from .messages import Message
from .providers.history import anthropic_content

# A mid-conversation system message sent as user text (module doc).
SYSTEM_REMINDER_HEADER = "[System message: an instruction from the system, not from the user]"


def system_reminder(msg: Message) -> str:
    """A system message as user text, for a model or a place that takes no system role."""
    return f"{SYSTEM_REMINDER_HEADER}\n{msg.context_text}"


def _add_system(msg: Message, messages: list[dict[str, Any]], accepted: bool) -> bool:
    """Add a history ``system`` message in place; False when it must travel as user text."""
    if not accepted or not messages or messages[-1]["role"] not in ("user", "system"):
        return False
    blocks = [b for b in anthropic_content(msg)[0] if b.get("type") == "text"]
    if messages[-1]["role"] == "system":
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": "system", "content": blocks})
    return True


def add_turn(
    messages: list[dict[str, Any]], strings: set[int], msg: Message, *, mid_system: bool
) -> None:
    """Add ``msg`` to ``messages``: merged into the last turn when it has the same role.

    ``strings`` holds the indexes of output messages that are one history
    message posted as a string (``restore_strings`` gives those back as one).
    """
    role = "assistant" if msg.role == "assistant" else "user"
    as_string = False
    if msg.role == "system":
        if _add_system(msg, messages, mid_system):
            return
        content = [{"type": "text", "text": system_reminder(msg)}]
    else:
        content, as_string = anthropic_content(msg)
    if not content:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(content)
        strings.discard(len(messages) - 1)
    else:
        if as_string:
            strings.add(len(messages))
        messages.append({"role": role, "content": content})


def strip_prefill(messages: list[dict[str, Any]]) -> None:
    """A last assistant turn is a prefill; the API rejects one ending in whitespace."""
    if messages and messages[-1]["role"] == "assistant":
        content = messages[-1]["content"]
        if content and content[-1]["type"] == "text":
            content[-1] = {**content[-1], "text": content[-1]["text"].rstrip()}


def restore_strings(messages: list[dict[str, Any]], strings: set[int]) -> None:
    """Alone in its turn and unmarked: the agent's own string form again."""
    for i in strings:
        blocks = messages[i]["content"]
        if len(blocks) == 1 and set(blocks[0]) == {"type", "text"}:
            messages[i]["content"] = blocks[0]["text"]
