"""The stream filter of the Responses dialect: built-in calls left out of what the client sees.

As ``streaming`` does for the other two: the events of an output item that
calls a built-in tool are dropped, a call to the final report (on a final
turn, when the client has no tool of that name) goes out as an assistant
message with the report's text (``responses_items.report_item``), the other items are renumbered
(``output_index``) so that several upstream rounds read as one response,
``sequence_number`` counts the events the client gets, and the events that
end a response (``response.completed`` / ``.incomplete`` / ``.failed``) are
held until the proxy knows whether it asks upstream again. The final
response's ``output`` lists the items the client was shown, a round-limit
note (``builtins.limit_note``) last when the loop was stopped.
"""

from __future__ import annotations

import json
from typing import Any

from contextsvc.engine.providers.sse import SseEvent

from ..streaming import frame
from .responses_items import note_item, report_item

_OPENING = ("response.created", "response.in_progress", "response.queued")
_ENDING = ("response.completed", "response.incomplete", "response.failed")


class ResponsesFilter:
    def __init__(self, runnable: frozenset[str], final: str | None = None) -> None:
        self.runnable = runnable
        self.report = final  # the final-report tool the proxy answers as text
        self.rounds = 0
        self.sequence = 0
        self.shown: list[dict[str, Any]] = []
        self.shown_calls = 0
        self._next = 0  # the client's next output_index, counted across rounds
        self._map: dict[int, int] = {}
        self._hidden: set[int] = set()
        self._reports: set[int] = set()  # final-report calls, shown as messages when done
        self._held: list[tuple[SseEvent, dict[str, Any]]] = []
        self.response_id: str | None = None  # the first round's: the one response the client sees
        self.final: dict[str, Any] | None = None

    def _out(self, event: SseEvent, data: dict[str, Any]) -> bytes:
        if "sequence_number" in data:
            data = {**data, "sequence_number": self.sequence}
        self.sequence += 1
        return frame(event, data)

    def feed(self, event: SseEvent) -> bytes:
        try:
            data = json.loads(event.data)
        except ValueError:
            return frame(event)
        if not isinstance(data, dict):
            return frame(event)
        kind = data.get("type")
        if kind in _OPENING:
            if self.rounds == 0:
                self.response_id = (data.get("response") or {}).get("id")
                return self._out(event, data)
            return b""
        if kind in _ENDING:
            self._held.append((event, data))
            return b""
        index = data.get("output_index")
        if not isinstance(index, int):
            return self._out(event, data)
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call" and item.get("name") in self.runnable:
                self._hidden.add(index)
            elif (
                item.get("type") == "function_call"
                and self.report
                and item.get("name") == self.report
            ):
                self._reports.add(index)
            elif index not in self._map:
                self._map[index] = self._next
                self._next += 1
                self.shown_calls += item.get("type") == "function_call"
        if index in self._reports:
            done = kind == "response.output_item.done"
            return self._message_events(report_item(data.get("item") or {})) if done else b""
        if index in self._hidden:
            return b""
        shown_index = self._map.get(index, index)
        if kind == "response.output_item.done":
            self.shown.append(data.get("item") or {})
        return self._out(event, {**data, "output_index": shown_index})

    def end_round(self, *, again: bool, note: str | None = None) -> bytes:
        """The held end of the response, unless upstream is asked again."""
        held, self._held = self._held, []
        self._map, self._hidden, self._reports = {}, set(), set()
        self.rounds += 1
        if again:
            return b""
        out = [self._message_events(note_item(note))] if note else []
        for event, data in held:
            response = data.get("response")
            if isinstance(response, dict):
                response = {**response, "output": list(self.shown)}
                response["id"] = self.response_id or response.get("id")
                data = {**data, "response": response}
                self.final = response
            out.append(self._out(event, data))
        return b"".join(out)

    def _message_events(self, item: dict[str, Any]) -> bytes:
        """An assistant message item (a note, a report), in the events a message streams as."""
        index, self._next = self._next, self._next + 1
        part = item["content"][0]
        text = part["text"]
        at = {"output_index": index, "item_id": item["id"], "content_index": 0}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.output_item.added", {"output_index": index, "item": {**item, "status": "in_progress", "content": []}}),
            ("response.content_part.added", {**at, "part": {**part, "text": ""}}),
            ("response.output_text.delta", {**at, "delta": text}),
            ("response.output_text.done", {**at, "text": text}),
            ("response.content_part.done", {**at, "part": part}),
            ("response.output_item.done", {"output_index": index, "item": item}),
        ]  # fmt: skip
        self.shown.append(item)
        return b"".join(
            self._out(SseEvent(event=kind), {"type": kind, **data, "sequence_number": 0})
            for kind, data in events
        )
