"""Stream filters: the client's view of a stream whose built-in tool calls the proxy answers itself.

When the proxy may run built-in tools, a stream is relayed event by event
(not chunk by chunk) through one of these: the events of a built-in call are
left out, the client's blocks / calls are renumbered so that several upstream
rounds read as one answer, and the events that end an answer are held until
the proxy knows whether it asks upstream again (then they are dropped and the
next round's events follow) or not (then they go out).

On a final turn the final-report call (``final``, when the client does not
define that tool) is left out the same way, its arguments kept, and its
report goes out as text just before the end of the answer. So does the note
of a loop the round limit stopped (``end_round(note=…)``, ``builtins.limit_note``).
"""

from __future__ import annotations

import json
from typing import Any

from contextsvc.engine.providers.sse import SseEvent

from .services.final import report_text


def frame(event: SseEvent, data: Any = None) -> bytes:
    """One event as SSE text (``data`` replaces the event's own when given)."""
    text = event.data if data is None else json.dumps(data, separators=(",", ":"))
    head = f"event: {event.event}\n" if event.event != "message" else ""
    return f"{head}data: {text}\n\n".encode()


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
        out = [self._text_block(report_text(pieces or "{}")) for pieces in _joined(reports)]
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
                delta = {**delta, "tool_calls": kept} if kept else _without(delta, "tool_calls")
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
        out = [self._report_chunk(held, report_text(p or "{}")) for p in _joined(reports)]
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


def is_usage_chunk(data: Any) -> bool:
    """The last chunk ``stream_options.include_usage`` adds: no choices, the usage."""
    return isinstance(data, dict) and data.get("choices") == [] and "usage" in data


class UsageStrip:
    """Chat Completions chunks as they come, less the usage chunk the client did not ask for.

    The proxy asks upstream for the usage (``stream_options.include_usage``)
    when the client set no ``stream_options``; what it reads of that chunk is
    stored, the client's stream stays as the client asked.
    """

    def feed(self, event: SseEvent) -> bytes:
        if '"usage"' in event.data and '"choices":[]' in event.data.replace(" ", ""):
            try:
                if is_usage_chunk(json.loads(event.data)):
                    return b""
            except ValueError:
                pass
        return frame(event)

    def end_round(self, *, again: bool, note: str | None = None) -> bytes:
        return b""


def _joined(reports: dict[int, list[str]]) -> list[str]:
    """Each held final-report call's arguments, its pieces joined."""
    return ["".join(pieces) for pieces in reports.values()]


def _without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}
