"""Make a history one every provider accepts: paired tool calls, a user turn first.

A stored transcript may be valid as a record yet invalid as a request: a tool
call left unanswered when the user spoke again, a window (compaction, a cut,
a retained tail) that starts with an assistant turn or with results whose call
fell outside it, a late result posted after other turns. Anthropic's Messages
API and OpenAI's Chat Completions reject each of these with a 400, so the one
assembler (``engine.build``) runs every provider format through
``well_formed`` first. The stored transcript is never changed: this is a view.

The rules, in provider-neutral form (``engine.build`` then merges same-role
turns for Anthropic):

- every assistant tool call is followed, right after its message, by exactly
  one tool message per call: the agent's result when it exists anywhere later
  (a late result moves up to its call), otherwise a synthetic "no result";
- a tool message whose call is not in the history (cut off by the window, or
  a second answer) becomes user text. Dropping it would lose the output the
  model may still need; it is kept, labelled, as what it now is: information;
- the history starts with a user message: when it would start with an
  assistant turn a minimal synthetic user message goes first. That keeps the
  assistant turn (its text and its calls) instead of dropping it;
- a request has a user turn: when nothing is left to send (a session with a
  system prompt only, or a compaction whose summary went into the system
  prompt and whose window kept no message) ``with_user_turn`` sends one
  marked synthetic user line, never stored (the Messages API rejects an
  empty ``messages``, and chat templates of OpenAI-compatible servers a
  conversation without a user message);
- messages with nothing to send (whitespace-only text, no media, no calls)
  are left out: Anthropic rejects whitespace-only text blocks;
- tool-call ids are unique in the request and match ``^[a-zA-Z0-9_-]+$``
  (Anthropic's pattern for ``tool_use.id``; Anthropic rejects a repeated
  one). A session may reuse an id once its call was answered (appends
  accept it, as OpenAI does), so a repeat is renamed here (``<id>_2``; the
  first use keeps its id, so the names are stable as the history grows),
  with the result that answers it and the provider meta kept for it; an id
  is only a pairing key inside one request, so renaming it changes nothing
  the model sees;
- a request that defines no tools carries no tool blocks (Anthropic rejects
  them): calls and results are then rendered as text, in place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .messages import Message, ToolCall
from .pairing import pair_tool_calls
from .providers.common import rename_call_meta

NO_RESULT_TEXT = "[no result: this tool call was not answered]"
LEADING_USER_TEXT = "[Earlier turns of this conversation are not shown.]"
# The user turn of a request that has nothing else to send (``with_user_turn``).
EMPTY_HISTORY_TEXT = "[No conversation messages are in context yet. Continue.]"
EMPTY_AFTER_SUMMARY_TEXT = (
    "[The earlier conversation is summarised in the system prompt; no later messages"
    " are in context. Continue from the summary.]"
)
_SYNTHETIC = (EMPTY_HISTORY_TEXT, EMPTY_AFTER_SUMMARY_TEXT)
ID_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")
_ID_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def has_content(msg: Message) -> bool:
    """True when the message carries something a provider will take."""
    if msg.role == "tool" or msg.tool_calls:
        return True
    shown = msg.view if msg.view is not None else msg.content
    if isinstance(shown, str):  # most of a history: no join of parts to build
        return bool(shown.strip())
    # Parts (a Gemini history is stored as parts): a text part with text, or any other
    # part — what ``context_text.strip() or part_count`` says, without joining the text.
    return any(
        part.get("type", "text") != "text" or str(part.get("text", "")).strip()
        for part in shown or ()
    )


def orphan_text(msg: Message) -> str:
    """A tool result whose call is not in the history, as plain user text."""
    label = f"{msg.name} call" if msg.name else "tool call"
    text = msg.context_text if msg.context_text.strip() else "(no output)"
    return f"[Result of {label} {msg.tool_call_id}; the call is no longer in context]\n{text}"


class CallIds:
    """Hands out request-unique ids, keeping the agent's id whenever it is valid.

    One instance per request; a request built in pieces (``engine.native_export``)
    passes the same one to each piece, so a reused id is renamed as in one pass.
    """

    def __init__(self, taken: set[str] | frozenset[str] = frozenset()) -> None:
        self.used: set[str] = set()
        # Ids an earlier, remembered part of the request holds (``engine.history_memo``):
        # read, never written, so the memo's set stays as it was if this build fails.
        self.taken = taken

    def take(self, original: str) -> str:
        base = original if ID_PATTERN.match(original or "") else _ID_UNSAFE.sub("_", original)
        base = base or "call"
        candidate, n = base, 1
        while candidate in self.used or candidate in self.taken:
            n += 1
            candidate = f"{base}_{n}"
        self.used.add(candidate)
        return candidate


def well_formed(
    messages: Sequence[Message],
    *,
    tools: bool = True,
    ids: CallIds | None = None,
    leading_user: bool = True,
) -> list[Message]:
    """The history as a provider accepts it (see the module docstring). Pure; O(n).

    ``tools``: whether the request defines tools; without, calls and results
    travel as text. ``ids`` and ``leading_user`` are for a history converted in
    pieces: the ids handed out so far, and whether this piece is the first
    (only the start of a history needs a user turn before it).
    """
    lead = leading_user_turn if leading_user else list
    if not tools:
        return lead(calls_as_text(messages))
    return lead(emit_paired(messages, ids if ids is not None else CallIds()).out)


@dataclass(slots=True)
class Emitted:
    """``well_formed``'s history before its leading user turn, and its last settled point.

    ``settled``: the longest input prefix none of whose calls waits for a result
    past it (each one answered inside it): its emission, ``out[:settled_out]``
    with the ids ``ids[:settled_ids]``, is final whatever is appended after it
    (pairing is a forward scan), so ``engine.history_memo`` keeps it.
    """

    out: list[Message]
    ids: list[str]
    settled: int = 0
    settled_out: int = 0
    settled_ids: int = 0


def emit_paired(messages: Sequence[Message], ids: CallIds) -> Emitted:
    """The paired history (``well_formed`` with tools, without the leading user turn). O(n)."""
    # Pass 1: which result answers which call (``engine.pairing``). A call is
    # keyed by (message index, call index), so a reused id pairs each result
    # with the nearest open call of that id, as the agent meant.
    pairing = pair_tool_calls(messages)
    result_of = pairing.result_of
    paired = pairing.call_of
    # Pass 2: emit in order, each call's results right after its message.
    emitted = Emitted(out=[], ids=[])
    out = emitted.out
    reach = -1  # the furthest input a call so far waits for (len: never answered)
    for i, msg in enumerate(messages):
        if msg.role == "tool":
            if i not in paired:
                out.append(Message(role="user", content=orphan_text(msg), seq=msg.seq))
        elif not has_content(msg):
            pass
        elif msg.role != "assistant" or not msg.tool_calls:
            out.append(msg)
        else:
            calls = tuple(
                call if (new := ids.take(call.id)) == call.id else replace(call, id=new)
                for call in msg.tool_calls
            )
            emitted.ids.extend(call.id for call in calls)
            if calls != msg.tool_calls:
                renames = [(a.id, b.id) for a, b in zip(msg.tool_calls, calls, strict=True)]
                content = rename_call_meta(msg.content, renames)
                msg = replace(msg, tool_calls=calls, content=content)
            out.append(msg)
            for k, call in enumerate(calls):
                answer = result_of.get((i, k))
                reach = max(reach, len(messages) if answer is None else answer)
                out.append(_result_for(call, None if answer is None else messages[answer]))
        if reach <= i:
            emitted.settled, emitted.settled_out = i + 1, len(out)
            emitted.settled_ids = len(emitted.ids)
    return emitted


def with_user_turn(
    history: list[Message], *, final_instruction: bool = False, system_summary: bool = False
) -> list[Message]:
    """``history`` (already ``well_formed``), or one marked user line when it is empty.

    ``final_instruction``: the request ends with one (a user turn already).
    ``system_summary``: the summary travels in the system prompt, so the line
    points at it. The summary itself stays where the policy puts it: moving it
    for this one call would send it twice or change the system prompt's layout.
    """
    if history or final_instruction:
        return history
    text = EMPTY_AFTER_SUMMARY_TEXT if system_summary else EMPTY_HISTORY_TEXT
    return [Message(role="user", content=text)]


def is_synthetic_turn(history: Sequence[Message]) -> bool:
    """True when ``history`` is only the line ``with_user_turn`` made up."""
    return len(history) == 1 and history[0].seq is None and history[0].content in _SYNTHETIC


def leading_user_turn(out: list[Message]) -> list[Message]:
    if out and out[0].role != "user":
        out.insert(0, Message(role="user", content=LEADING_USER_TEXT))
    return out


def calls_as_text(messages: Sequence[Message]) -> list[Message]:
    """Tool calls and results as plain text, for a request that defines no tools."""
    out: list[Message] = []
    for msg in messages:
        if msg.role == "tool":
            label = f"{msg.name} call" if msg.name else "tool call"
            text = msg.context_text if msg.context_text.strip() else "(no output)"
            out.append(
                Message(role="user", content=f"[Result of {label} {msg.tool_call_id}]\n{text}")
            )
        elif msg.tool_calls:
            calls = "\n".join(
                f"[Called {c.name} (call {c.id}) with"
                f" {json.dumps(c.arguments, ensure_ascii=False, default=str)}]"
                for c in msg.tool_calls
            )
            text = msg.context_text.strip()
            out.append(Message(role="assistant", content=f"{text}\n{calls}" if text else calls))
        elif has_content(msg):
            out.append(msg)
    return out


def _result_for(call: ToolCall, answer: Message | None) -> Message:
    if answer is None:
        return Message(role="tool", content=NO_RESULT_TEXT, tool_call_id=call.id, name=call.name)
    if answer.tool_call_id == call.id:
        return answer
    return replace(answer, tool_call_id=call.id)
