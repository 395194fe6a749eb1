"""Gemini answers to the transcript: usage, a ``GenerateContentResponse``, and its SSE stream.

``streamGenerateContent?alt=sse`` sends one ``GenerateContentResponse`` per
``data:`` event and no end marker: the last chunk carries the candidate's
``finishReason`` and the final ``usageMetadata``. ``GeminiStream`` follows the
accumulators of ``providers.sse``: fed each event while it is relayed, it
gives back the same ``Reply`` a non-streaming answer gives. Text pieces of
consecutive parts of one kind (answer or thought) concatenate; a
``functionCall`` part arrives whole in one chunk, so an incomplete stream
keeps every call it saw.

Usage (``usageMetadata``): ``promptTokenCount`` includes the cached prompt
(``cachedContentTokenCount``), so input is their difference and the cached
part is a cache read; output is ``candidatesTokenCount`` plus
``thoughtsTokenCount`` (thinking is billed as output).
"""

from __future__ import annotations

from typing import Any

from .common import ConversionError, Reply, Usage, as_int
from .gemini import OpenCalls, model_to_transcript
from .sse import SseEvent


def _event_data(event: SseEvent | dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(event, dict):
        return event
    try:
        data = event.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def usage_from_gemini(usage: dict[str, Any] | None) -> Usage:
    usage = usage or {}
    prompt = as_int(usage.get("promptTokenCount"))
    cached = min(as_int(usage.get("cachedContentTokenCount")), prompt)
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=as_int(usage.get("candidatesTokenCount"))
        + as_int(usage.get("thoughtsTokenCount")),
        cache_read_tokens=cached,
    )


def _candidate(response: dict[str, Any]) -> dict[str, Any]:
    candidates = response.get("candidates")
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
        return candidates[0]
    return {}


def reply_from_response(response: dict[str, Any]) -> Reply:
    """A non-streaming ``GenerateContentResponse`` → candidate 0's assistant message + usage.

    An answer without candidates (a blocked prompt: ``promptFeedback``) is an
    empty assistant message; its block reason is the stop reason.
    """
    if not isinstance(response, dict):
        raise ConversionError("Invalid value: a response is an object", "")
    candidate = _candidate(response)
    parts = (candidate.get("content") or {}).get("parts") or []
    stop = candidate.get("finishReason") or (response.get("promptFeedback") or {}).get(
        "blockReason"
    )
    return Reply(
        message=model_to_transcript([p for p in parts if isinstance(p, dict)], OpenCalls()),
        usage=usage_from_gemini(response.get("usageMetadata")),
        stop_reason=stop,
        id=response.get("responseId"),
        model=response.get("modelVersion"),
    )


def _joinable(last: dict[str, Any], part: dict[str, Any]) -> bool:
    """A text piece continues the part before it: both text, same kind, no signature between."""
    return (
        isinstance(last.get("text"), str)
        and isinstance(part.get("text"), str)
        and bool(last.get("thought")) == bool(part.get("thought"))
        and "thoughtSignature" not in last
        and set(part) <= {"text", "thought", "thoughtSignature"}
        and set(last) <= {"text", "thought", "thoughtSignature"}
    )


class GeminiStream:
    """Accumulates a ``streamGenerateContent`` SSE stream (candidate 0)."""

    def __init__(self) -> None:
        self.done = False
        self.error: dict[str, Any] | None = None
        self._parts: list[dict[str, Any]] = []
        self._usage: dict[str, Any] | None = None
        self._finish: str | None = None
        self._id: str | None = None
        self._model: str | None = None

    def feed(self, event: SseEvent | dict[str, Any]) -> None:
        data = _event_data(event)
        if data is None:
            return
        if isinstance(data.get("error"), dict):
            self.error = data["error"]
            return
        self._id = self._id or data.get("responseId")
        self._model = self._model or data.get("modelVersion")
        if isinstance(data.get("usageMetadata"), dict):
            # Each chunk's figures are the running totals: the last one counts.
            self._usage = data["usageMetadata"]
        candidate = _candidate(data)
        for part in (candidate.get("content") or {}).get("parts") or ():
            if not isinstance(part, dict):
                continue
            if self._parts and _joinable(self._parts[-1], part):
                last = self._parts[-1]
                merged = {**last, "text": last["text"] + part["text"]}
                if "thoughtSignature" in part:
                    merged["thoughtSignature"] = part["thoughtSignature"]
                self._parts[-1] = merged
            else:
                self._parts.append(dict(part))
        if candidate.get("finishReason"):
            self._finish = candidate["finishReason"]
            self.done = True
        blocked = (data.get("promptFeedback") or {}).get("blockReason")
        if blocked:
            self._finish, self.done = blocked, True

    def result(self, *, incomplete: bool | None = None) -> Reply:
        """The message so far; ``incomplete`` defaults to "no ``finishReason`` seen"."""
        if incomplete is None:
            incomplete = not self.done
        return Reply(
            message=model_to_transcript(self._parts, OpenCalls()),
            usage=usage_from_gemini(self._usage),
            stop_reason=self._finish,
            id=self._id,
            model=self._model,
            incomplete=incomplete,
            error=self.error,
        )
