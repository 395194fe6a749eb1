"""The managed context as a Gemini ``generateContent`` body.

``engine.build`` lays the context out (sections, a well-formed history, the
tail) and hands the parts here. Each history message becomes one turn through
the converter (``gemini_contents.message_turn``, kept per message by
``history.memo``); then:

- consecutive same-role turns merge: the results of one ``model`` turn's calls
  all travel in the next ``user`` turn, as the API requires, and a
  ``functionCall`` turn always follows a user turn;
- a ``functionResponse`` takes its call's name and id (the API pairs them by
  name; the agent may have posted a result without the name); a call whose id
  the converter made up goes without one, and so does its response;
- the first turn is a user turn (a leading one may have had only parts Gemini
  has no form for);
- the tail (status sections and notes) and a final instruction are user text
  after the history, after everything an implicit prefix cache could reuse.

Gemini names the model in the URL, not the body, and caches by prefix
without markers, so the body has neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages import Message, ToolDef
from ..wellformed import EMPTY_HISTORY_TEXT
from .gemini import tools_from_defs
from .gemini_contents import message_turn
from .history import memo, transcript_dict

LEADING_USER_TEXT = "[Earlier turns of this conversation are not shown.]"


def _turn(msg: Message) -> dict[str, Any]:
    message = transcript_dict(msg)
    if msg.view is not None:
        message["content"] = msg.context_text  # the view, without the stored meta
    return message_turn(message, strict=True)[0]


def _content(turn: dict[str, Any]) -> dict[str, Any]:
    return {"role": turn.get("role", "user"), "parts": turn["parts"]}


def history_contents(
    history: Sequence[Message], *, leading_user: bool = True
) -> list[dict[str, Any]]:
    """The well-formed history as ``contents`` (module doc: the rules).

    ``leading_user``: this is the history's start (``engine.native_export``
    converts a transcript in pieces; only the first may need the user turn).
    """
    contents: list[dict[str, Any]] = []
    owned = True  # whether ``contents[-1]`` is this build's own (not a memo's)
    calls: dict[str, tuple[str, bool]] = {}  # call id -> (name, sent with its id)
    for msg in history:
        turn = memo(msg, "gemini", _turn)
        # The memo's parts are shared by every build of this message object (as the
        # Anthropic build's blocks are): a part that changes is replaced by a changed
        # copy, never edited, so a long history's build copies no part per message.
        parts = turn["parts"]
        for call in msg.tool_calls:
            calls[call.id] = (call.name, False)
        for k, part in enumerate(parts):
            if "functionCall" in part:
                function = part["functionCall"]
                calls[function.get("id", "")] = (function["name"], True)
            elif "functionResponse" in part and msg.tool_call_id is not None:
                name, with_id = calls.get(msg.tool_call_id, (msg.name or "", False))
                response = {**part["functionResponse"], "name": name}
                response.pop("id", None)
                if with_id:
                    response = {"name": name, "id": msg.tool_call_id, **response}
                if parts is turn["parts"]:
                    parts = list(parts)
                parts[k] = {**part, "functionResponse": response}
        if not parts:
            continue
        # Consecutive same-role turns as one (``merge_turns``). An unchanged message's
        # content is the memo's too (no dict or list per message and call: a long
        # history's build would feed the garbage collector thousands); a content that
        # grows is the build's own copy first, and so is the last one, which the
        # tail's text and a piecewise export extend.
        role = turn.get("role", "user")
        if contents and contents[-1]["role"] == role:
            if not owned:
                contents[-1] = {"role": role, "parts": list(contents[-1]["parts"])}
                owned = True
            contents[-1]["parts"].extend(parts)
        elif parts is turn["parts"]:
            contents.append(memo(msg, "gemini_content", lambda _, t=turn: _content(t)))
            owned = False
        else:
            contents.append({"role": role, "parts": parts})
            owned = True
    if contents and not owned:
        contents[-1] = {"role": contents[-1]["role"], "parts": list(contents[-1]["parts"])}
    if leading_user and contents and contents[0]["role"] != "user":
        contents.insert(0, {"role": "user", "parts": [{"text": LEADING_USER_TEXT}]})
    return contents


def _user_text(contents: list[dict[str, Any]], texts: list[str]) -> None:
    parts = [{"text": t} for t in texts if t.strip()]
    if not parts:
        return
    if contents and contents[-1]["role"] == "user":
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": "user", "parts": parts})


def gemini_body(
    *,
    history: Sequence[Message],
    system: list[str],
    tail: list[str],
    final_instruction: str | None,
    max_output_tokens: int,
    tools: Sequence[ToolDef],
) -> dict[str, Any]:
    contents = history_contents(history)
    _user_text(contents, ["\n\n".join(tail)] if tail else [])
    _user_text(contents, [final_instruction] if final_instruction else [])
    if not contents:  # every message had only parts Gemini has no form for
        contents.append({"role": "user", "parts": [{"text": EMPTY_HISTORY_TEXT}]})
    body: dict[str, Any] = {"contents": contents}
    system_parts = [{"text": text} for text in system if text.strip()]
    if system_parts:
        body["systemInstruction"] = {"parts": system_parts}
    if tools:
        body["tools"] = tools_from_defs(tools)
    body["generationConfig"] = {"maxOutputTokens": max_output_tokens}
    return body
