"""Transcript messages to Gemini ``contents``: the way back of ``providers.gemini``.

Each transcript message becomes one turn (``message_turn``); a message whose
meta says it came from the same turn as the one before (``gemini_join``) is
merged into it. ``build_contents`` is the build's variant: every run of
same-role turns is merged (a ``functionCall`` turn's results must all be in
the next user turn), made-up ids are left out as in the way back, and parts a
request cannot carry (empty text, other providers' blocks) are left out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .common import take_meta

# Transcript part types of other providers that Gemini has no form for.
_FOREIGN = frozenset(
    {"thinking", "redacted_thinking", "tool_use", "tool_result", "refusal", "input_audio", "file"}
)


def part_from_transcript(part: dict[str, Any]) -> dict[str, Any] | None:
    """A transcript content part as a Gemini part, or None when Gemini has no form for it."""
    kind = part.get("type", "text")
    if kind == "text":
        return {"text": str(part.get("text") or "")}
    if kind == "gemini":
        return dict(part.get("part") or {})
    if kind == "image":
        source = part.get("source") or {}
        if source.get("type") == "base64":
            mime = source.get("media_type", "image/png")
            return {"inlineData": {"mimeType": mime, "data": source.get("data", "")}}
        if source.get("type") == "url" and source.get("url"):
            return {"fileData": {"fileUri": source["url"]}}
    if kind == "image_url":
        url = str((part.get("image_url") or {}).get("url") or "")
        head, _, data = url.partition(";base64,")
        if head.startswith("data:") and data:
            return {"inlineData": {"mimeType": head[5:], "data": data}}
        if url:
            return {"fileData": {"fileUri": url}}
    return None


def _response_object(text: str, meta: dict[str, Any]) -> Any:
    if meta.get("gemini_json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return {"output": text}
    return {"error": text} if meta.get("is_error") else {"output": text}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        str(p.get("text", "")) for p in content or () if p.get("type", "text") == "text"
    )


def message_turn(message: dict[str, Any], *, strict: bool = False) -> tuple[dict[str, Any], bool]:
    """(one message as a Gemini turn, whether it joins the turn before).

    ``strict`` (the build): leave out what a request cannot carry (empty text
    parts, other providers' blocks) rather than keep the message as it came.
    """
    content, meta = take_meta(message.get("content", ""))
    role = message["role"]
    extra = meta.get("gemini_content", {})
    turn_role = "model" if role == "assistant" else "user"
    parts: list[dict[str, Any]] = []
    if role == "tool":
        response: dict[str, Any] = {"name": message.get("name") or ""}
        if "gemini_response_id" in meta:
            response["id"] = meta["gemini_response_id"]
        elif not meta.get("gemini_made_id"):
            response["id"] = message["tool_call_id"]
        response["response"] = _response_object(_text_of(content), meta)
        response.update(meta.get("gemini_response", {}))
        parts.append({"functionResponse": response, **meta.get("gemini_part", {})})
    else:
        if role == "assistant":
            parts.extend(dict(t) for t in meta.get("gemini_thoughts", ()))
        # An empty string is no part: the API refuses an empty text part.
        items = (
            ([{"type": "text", "text": content}] if content else [])
            if isinstance(content, str)
            else content
        )
        for item in items or ():
            part = part_from_transcript(item) if item.get("type") not in _FOREIGN else None
            if part is None or (strict and set(part) == {"text"} and not part["text"].strip()):
                continue
            parts.append(part)
        parts.extend(_call_parts(message.get("tool_calls") or (), meta.get("gemini_calls", {})))
    turn: dict[str, Any] = {"role": turn_role, "parts": parts}
    if meta.get("gemini_no_role"):
        del turn["role"]
    turn.update(extra)
    return turn, bool(meta.get("gemini_join"))


def _call_parts(calls: Sequence[dict[str, Any]], kept: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for call in calls:
        info = kept.get(call["id"], {})
        function: dict[str, Any] = {"name": call["name"]}
        if not info.get("no_args"):
            function["args"] = call.get("arguments", {})
        if not info.get("made"):
            function["id"] = call["id"]
        function.update(info.get("call", {}))
        out.append({"functionCall": function, **info.get("part", {})})
    return out


def contents_from_transcript(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Transcript message dicts → ``contents`` (``providers.gemini``'s module doc: the rules)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        turn, join = message_turn(message)
        if join and out:
            out[-1]["parts"].extend(turn["parts"])
        else:
            out.append(turn)
    return out


def merge_turns(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive same-role turns as one (the turns' part lists are copied, not shared)."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        if not turn["parts"]:
            continue
        if out and out[-1]["role"] == turn["role"]:
            out[-1]["parts"].extend(turn["parts"])
        else:
            out.append({"role": turn["role"], "parts": list(turn["parts"])})
    return out
