"""The Anthropic Messages API's request rules, as the fake upstream applies them.

``validate`` checks a request the way the real API does where it matters to
compaction, and raises ``InvalidRequest`` with the real API's wording (where it
is known; the fake answers it as ``400 invalid_request_error``) when:

- a ``tool_use`` block has no ``tool_result`` for it in the very next message
  (docs/concepts/compaction.md#strip-trailing-calls: summarising with a trailing assistant
  ``tool_calls``);
- a ``tool_result`` answers no ``tool_use`` of the previous message, answers
  one twice, or follows other content in its user message (results come first);
- ``tool_use`` ids repeat within the request or do not match ``^[a-zA-Z0-9_-]+$``;
- a text block is whitespace-only, or a final (prefill) assistant message ends
  in whitespace;
- a request carries ``tool_use`` / ``tool_result`` blocks but defines no tools;
- the first message is not a user message, a message is empty, a text block
  is empty, a role is unknown, ``model`` / ``max_tokens`` / ``messages`` are
  missing;
- extended thinking: with ``thinking`` enabled (not ``adaptive``, where the
  model may skip thinking on a turn), the assistant turn whose
  ``tool_use`` blocks the last user turn answers (the tool loop in progress)
  must start with a ``thinking`` / ``redacted_thinking`` block; with it
  disabled, a final (prefill) assistant message may hold no thinking; and a
  ``thinking`` block's ``signature`` must be one this server issued for that
  text (``fakes.streams`` signs with the text's SHA-256), as the real
  API rejects a block that was altered or made up.

Consecutive messages of the same role are combined into one turn before the
pairing rules apply, as the API documents it does.

Mid-conversation ``system`` messages (a ``system`` role inside ``messages``,
taken from Claude Opus 4.8 on) are accepted right after a user message and
rejected anywhere else; a model named in ``no_mid_system`` (by prefix: the
older models) rejects them with "role 'system' is not supported on this
model", as those models do.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

# The pattern the API requires of a tool_use id.
TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


class InvalidRequest(Exception):
    pass


def message_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _turns(messages: list[dict[str, Any]]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """Consecutive same-role messages as one turn, as the API combines them.

    Each turn is (index of its first message, role, blocks).
    """
    turns: list[tuple[int, str, list[dict[str, Any]]]] = []
    for i, message in enumerate(messages):
        if message["role"] == "system":
            continue  # an instruction between turns: no part of the pairing
        if turns and turns[-1][1] == message["role"]:
            turns[-1][2].extend(message_blocks(message))
        else:
            turns.append((i, message["role"], list(message_blocks(message))))
    return turns


# Model-name prefixes of the models older than Claude Opus 4.8: no system role
# inside ``messages``.
OLDER_MODELS = (
    "claude-3",
    "claude-opus-4-0",
    "claude-opus-4-1",
    "claude-opus-4-5",
    "claude-sonnet-4",
    "claude-haiku-4",
)


def _check_system_messages(body: dict[str, Any], no_mid_system: tuple[str, ...]) -> None:
    messages = body["messages"]
    for i, message in enumerate(messages):
        if message.get("role") != "system":
            continue
        if str(body.get("model", "")).startswith(no_mid_system):
            raise InvalidRequest(f"messages.{i}.role: role 'system' is not supported on this model")
        if i == 0 or messages[i - 1].get("role") != "user":
            raise InvalidRequest(
                f"messages.{i}: a system message must come right after a user message"
            )
        for j, block in enumerate(message_blocks(message)):
            if block.get("type") != "text":
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: system messages may only hold text blocks"
                )


THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
THINKING_KINDS = ("thinking", "redacted_thinking")


def _check_thinking(body: dict[str, Any]) -> None:
    """The extended-thinking rules of the Messages API, with its wording."""
    messages = body["messages"]
    kind = (body.get("thinking") or {}).get("type")
    # ``adaptive`` lets the model skip thinking on a turn, so a tool loop's
    # turn need not start with it then; ``enabled`` always thinks first.
    enabled = kind in ("enabled", "adaptive")
    required = kind == "enabled"
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for j, block in enumerate(message_blocks(message)):
            if block.get("type") != "thinking":
                continue
            text = str(block.get("thinking") or "")
            if block.get("signature") != hashlib.sha256(text.encode()).hexdigest():
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                )
    last = messages[-1]
    if not enabled:
        if last.get("role") == "assistant" and any(
            b.get("type") in THINKING_KINDS for b in message_blocks(last)
        ):
            raise InvalidRequest(
                f"messages.{len(messages) - 1}.content.0: When thinking is disabled, an"
                " `assistant` message in the final position cannot contain `thinking`. To use"
                " thinking blocks, enable `thinking` in your request."
            )
        return
    turns = _turns(messages)
    if not required or len(turns) < 2 or turns[-1][1] != "user":
        return
    if not any(b.get("type") == "tool_result" for b in turns[-1][2]):
        return  # a new user turn: no tool loop in progress
    index, role, blocks = turns[-2]
    if role != "assistant" or not blocks:
        return
    first = blocks[0].get("type")
    if first not in THINKING_KINDS:
        raise InvalidRequest(
            f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`,"
            f" but found `{first}`. When `thinking` is enabled, a final `assistant` message"
            " must start with a thinking block (preceeding the lastmost set of `tool_use` and"
            " `tool_result` blocks). We recommend you include thinking blocks from previous"
            " turns. To avoid this requirement, disable `thinking`. Please consult our"
            f" documentation at {THINKING_DOCS}"
        )


def validate(body: dict[str, Any], no_mid_system: tuple[str, ...] = OLDER_MODELS) -> None:
    """Raise ``InvalidRequest`` with the real API's message for what it rejects."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidRequest("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")
    if messages[0].get("role") != "user":
        raise InvalidRequest('messages: first message must use the "user" role')
    _check_system_messages(body, no_mid_system)
    has_tools = bool(body.get("tools"))
    uses_tools = False
    use_ids: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise InvalidRequest(
                f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'"
            )
        blocks = message_blocks(message)
        final_assistant = i == len(messages) - 1 and role == "assistant"
        if not blocks and not final_assistant:
            raise InvalidRequest(
                f"messages.{i}: all messages must have non-empty content except for the optional"
                " final assistant message"
            )
        for j, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "text" and not block.get("text"):
                raise InvalidRequest(
                    f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
                )
            if kind == "text" and not str(block["text"]).strip():
                raise InvalidRequest(
                    f"messages.{i}.content.{j}.text: text content blocks must contain"
                    " non-whitespace text"
                )
            if kind in ("tool_use", "tool_result"):
                uses_tools = True
            if kind == "tool_use" and role != "assistant":
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: tool_use blocks are only allowed in assistant"
                    " messages"
                )
            if kind == "tool_result" and role != "user":
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: tool_result blocks are only allowed in user"
                    " messages"
                )
            if kind == "tool_use":
                use_id = block.get("id")
                if not isinstance(use_id, str) or not TOOL_USE_ID.match(use_id):
                    raise InvalidRequest(
                        f"messages.{i}.content.{j}.id: String should match pattern"
                        " '^[a-zA-Z0-9_-]+$'"
                    )
                if use_id in use_ids:
                    raise InvalidRequest(
                        f"messages.{i}.content.{j}: `tool_use` ids must be unique: {use_id}"
                    )
                use_ids.add(use_id)
        if final_assistant and blocks:
            last = blocks[-1]
            if (
                last.get("type") == "text"
                and str(last.get("text", "")) != str(last.get("text", "")).rstrip()
            ):
                raise InvalidRequest(
                    "messages: final assistant content cannot end with trailing whitespace"
                )
    if uses_tools and not has_tools:
        raise InvalidRequest(
            "Requests which include `tool_use` or `tool_result` blocks must define tools."
        )
    # Pairing is checked on turns: the API documents that consecutive same-role
    # messages are combined into one turn.
    turns = _turns(messages)
    for t, (i, role, blocks) in enumerate(turns):
        if role == "assistant":
            ids = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            if not ids:
                continue
            nxt = turns[t + 1] if t + 1 < len(turns) else None
            answered = (
                {b.get("tool_use_id") for b in nxt[2] if b.get("type") == "tool_result"}
                if nxt is not None
                else set()
            )
            missing = [u for u in ids if u not in answered]
            if missing:
                raise InvalidRequest(
                    f"messages.{nxt[0] if nxt is not None else i}: `tool_use` ids were found"
                    " without `tool_result` blocks immediately after: "
                    f"{', '.join(missing)}. Each `tool_use` block must have a corresponding"
                    " `tool_result` block in the next message."
                )
            continue
        prev = turns[t - 1] if t > 0 else None
        ids_before = (
            {b.get("id") for b in prev[2] if b.get("type") == "tool_use"}
            if prev is not None
            else set()
        )
        answered_here: set[str] = set()
        seen_other = False
        for j, block in enumerate(blocks):
            if block.get("type") != "tool_result":
                seen_other = True
                continue
            use_id = block.get("tool_use_id")
            if use_id not in ids_before:
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result`"
                    f" blocks: {use_id}. Each `tool_result` block must have a"
                    " corresponding `tool_use` block in the previous message."
                )
            if use_id in answered_here:
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: each `tool_use` must have a single"
                    f" `tool_result`; found a second one for {use_id}"
                )
            if seen_other:
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: `tool_result` blocks must come first in a user"
                    " message, before any other content"
                )
            answered_here.add(use_id)
    _check_thinking(body)
