"""The Chat Completions stream as the client sees it (``proxy.streaming``: what a filter does)."""

from __future__ import annotations

import json
from typing import Any

from contextsvc.engine.providers.sse import SseEvent

from ..streaming import frame, is_usage_chunk, joined, without
from .report import report_text


class OpenAIFilter:
    """Chat Completions chunks: tool calls renumbered, the finish, the usage and ``[DONE]`` held."""

    def __init__(
        self, runnable: frozenset[str], final: str | None = None, *, strip_usage: bool = False
    ) -> None:
        self.runnable = runnable
        self.final = final
        self.strip_usage = strip_usage
        self.shown_calls = 0
        self._map: dict[int, int] = {}
        self._hidden: set[int] = set()
        self._reports: dict[int, list[str]] = {}  # final-report calls: their arguments, in pieces
        self._held: list[tuple[SseEvent, Any]] = []
        self.shown_text = False  # some content went out (a note then starts a paragraph)

    def feed(self, event: SseEvent) -> bytes:
        if event.data.strip() == "[DONE]":
            self._held.append((event, None))
            return b""
        try:
            data = json.loads(event.data)
        except ValueError:
            return frame(event)
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            return frame(event)
        changed = False
        choices = []
        for choice in data["choices"]:
            delta = choice.get("delta") or {}
            self.shown_text = self.shown_text or bool(delta.get("content"))
            pieces = delta.get("tool_calls")
            if pieces:
                kept = self._pieces(pieces)
                changed = True
                delta = {**delta, "tool_calls": kept} if kept else without(delta, "tool_calls")
                empty = not any(v for k, v in delta.items() if k != "role")
                if not kept and empty and not choice.get("finish_reason"):
                    continue
            choices.append({**choice, "delta": delta})
        if changed:
            data = {**data, "choices": choices}
        if not data["choices"] or any(c.get("finish_reason") for c in data["choices"]):
            self._held.append((event, data))  # the finish and the usage: held
            return b""
        if not changed:
            return frame(event)
        return frame(event, data) if choices else b""

    def _pieces(self, pieces: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = []
        for position, piece in enumerate(pieces):
            index = piece.get("index", position)
            name = (piece.get("function") or {}).get("name")
            if index not in self._map and index not in self._hidden:
                if name in self.runnable:
                    self._hidden.add(index)
                elif self.final and name == self.final:
                    self._hidden.add(index)
                    self._reports[index] = []
                else:
                    self._map[index] = self.shown_calls
                    self.shown_calls += 1
            if index in self._reports:
                self._reports[index].append(
                    str((piece.get("function") or {}).get("arguments") or "")
                )
            if index in self._hidden:
                continue
            kept.append({**piece, "index": self._map[index]})
        return kept

    def end_round(self, *, again: bool, note: str | None = None) -> bytes:
        held, self._held = self._held, []
        reports, self._reports = self._reports, {}
        self._map, self._hidden = {}, set()
        if again:
            return b""
        out = [self._report_chunk(held, report_text(p or "{}")) for p in joined(reports)]
        if note:
            out.append(self._report_chunk(held, f"\n\n{note}" if self.shown_text else note))
        for event, data in held:
            if self.strip_usage and is_usage_chunk(data):
                continue
            if isinstance(data, dict) and not self.shown_calls:
                data = {
                    **data,
                    "choices": [
                        {**c, "finish_reason": "stop"}
                        if c.get("finish_reason") == "tool_calls"
                        else c
                        for c in data["choices"]
                    ],
                }
            out.append(frame(event, data) if isinstance(data, dict) else frame(event))
        return b"".join(out)

    @staticmethod
    def _report_chunk(held: list[tuple[SseEvent, Any]], text: str) -> bytes:
        """Text (a report, a note) as a content chunk, shaped like the held finish chunk (id, model …)."""
        template = next(
            (d for _, d in held if isinstance(d, dict)), {"object": "chat.completion.chunk"}
        )
        choice = {
            "index": 0,
            "delta": {"content": text},
            "finish_reason": None,
        }
        chunk = {k: v for k, v in template.items() if k != "usage"}
        return frame(SseEvent(), {**chunk, "choices": [choice]})
