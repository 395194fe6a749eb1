"""The client's view of a Gemini stream whose built-in calls the proxy answers (``proxy.streaming``).

A ``streamGenerateContent`` chunk is one ``GenerateContentResponse``; each
``functionCall`` part arrives whole in one chunk, so a built-in call is left
out by dropping its part (a chunk left with no part and no end says nothing
and is dropped too). The chunk that ends the answer (``finishReason``) is
held until the proxy knows whether it asks upstream again: then it is
dropped and the next round's chunks follow; else the final-report text and
the round-limit note go out as text chunks, then the held end.
"""

from __future__ import annotations

import json
from typing import Any

from contextsvc.engine.providers.sse import SseEvent

from ..streaming import frame
from .report import report_text


def _candidate(data: dict[str, Any]) -> dict[str, Any] | None:
    candidates = data.get("candidates")
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
        return candidates[0]
    return None


class GeminiFilter:
    """``GenerateContentResponse`` chunks: built-in and final-report calls out, the end held."""

    def __init__(self, runnable: frozenset[str], final: str | None = None) -> None:
        self.runnable = runnable
        self.final = final
        self._reports: list[Any] = []  # final-report calls' arguments
        self._held: list[dict[str, Any]] = []
        self._template: dict[str, Any] = {}  # a chunk's head (model version, id) for ours

    def feed(self, event: SseEvent) -> bytes:
        try:
            data = json.loads(event.data)
        except ValueError:
            return frame(event)
        candidate = _candidate(data) if isinstance(data, dict) else None
        if candidate is None:
            return frame(event)
        self._template = {k: data[k] for k in ("modelVersion", "responseId") if k in data}
        parts = (candidate.get("content") or {}).get("parts")
        kept = parts
        if isinstance(parts, list):
            kept = [p for p in parts if not self._hidden(p)]
        if kept is not parts:
            content = {**(candidate.get("content") or {}), "parts": kept}
            candidate = {**candidate, "content": content}
            data = {**data, "candidates": [candidate, *data["candidates"][1:]]}
        if candidate.get("finishReason"):
            self._held.append(data)
            return b""
        if kept is not parts and not kept:
            return b""
        return frame(event, data) if kept is not parts else frame(event)

    def _hidden(self, part: Any) -> bool:
        call = part.get("functionCall") if isinstance(part, dict) else None
        if not isinstance(call, dict):
            return False
        if call.get("name") in self.runnable:
            return True
        if self.final and call.get("name") == self.final:
            self._reports.append(call.get("args") or {})
            return True
        return False

    def end_round(self, *, again: bool, note: str | None = None) -> bytes:
        held, self._held = self._held, []
        reports, self._reports = self._reports, []
        if again:
            return b""
        texts = [report_text(args) for args in reports]
        if note:
            texts.append(note)
        out = [self._text_chunk(text) for text in texts]
        out.extend(frame(SseEvent(), data) for data in held)
        return b"".join(out)

    def _text_chunk(self, text: str) -> bytes:
        candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
        return frame(SseEvent(), {"candidates": [candidate], **self._template})
