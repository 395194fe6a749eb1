"""The Messages stream as the client sees it (``proxy.streaming``: what a filter does)."""

from __future__ import annotations

import json
from typing import Any

from contextsvc.engine.providers.sse import SseEvent

from ..streaming import frame, joined
from .report import report_text


class AnthropicFilter:
    """Messages events: ``message_start`` once, blocks renumbered, the end held."""

    def __init__(self, runnable: frozenset[str], final: str | None = None) -> None:
        self.runnable = runnable
        self.final = final
        self.rounds = 0
        self.shown_blocks = 0
        self.shown_calls = 0
        self._map: dict[int, int] = {}
        self._hidden: set[int] = set()
        self._reports: dict[int, list[str]] = {}  # final-report blocks: their input, in pieces
        self._held: list[tuple[SseEvent, dict[str, Any]]] = []

    def feed(self, event: SseEvent) -> bytes:
        try:
            data = json.loads(event.data)
        except ValueError:
            return frame(event)
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "message_start":
            return frame(event) if self.rounds == 0 else b""
        if kind in ("message_delta", "message_stop"):
            self._held.append((event, data))
            return b""
        if kind == "content_block_start":
            block = data.get("content_block") or {}
            index = data.get("index", 0)
            if block.get("type") == "tool_use" and block.get("name") in self.runnable:
                self._hidden.add(index)
                return b""
            if block.get("type") == "tool_use" and self.final and block.get("name") == self.final:
                self._hidden.add(index)
                self._reports[index] = []
                return b""
            if block.get("type") == "tool_use":
                self.shown_calls += 1
            self._map[index] = self.shown_blocks
            self.shown_blocks += 1
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            index = data.get("index", 0)
            if index in self._reports and kind == "content_block_delta":
                self._reports[index].append(str((data.get("delta") or {}).get("partial_json", "")))
            if index in self._hidden:
                return b""
            if self._map.get(index, index) != index:
                return frame(event, {**data, "index": self._map[index]})
        return frame(event)

    def end_round(self, *, again: bool, note: str | None = None) -> bytes:
        """The held end of the answer, unless upstream is asked again."""
        held, self._held = self._held, []
        reports, self._reports = self._reports, {}
        self._map, self._hidden = {}, set()
        self.rounds += 1
        if again:
            return b""
        out = [self._text_block(report_text(pieces or "{}")) for pieces in joined(reports)]
        if note:
            out.append(self._text_block(note))
        for event, data in held:
            delta = data.get("delta") or {}
            if delta.get("stop_reason") == "tool_use" and not self.shown_calls:
                data = {**data, "delta": {**delta, "stop_reason": "end_turn"}}
                out.append(frame(event, data))
            else:
                out.append(frame(event))
        return b"".join(out)

    def _text_block(self, text: str) -> bytes:
        index = self.shown_blocks
        self.shown_blocks += 1
        events = (
            ("content_block_start", {"content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"delta": {"type": "text_delta", "text": text}}),
            ("content_block_stop", {}),
        )
        return b"".join(
            frame(SseEvent(event=kind), {"type": kind, "index": index, **data})
            for kind, data in events
        )
