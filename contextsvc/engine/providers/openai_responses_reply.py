"""Responses API answers in the transcript's terms: a response's output, its usage, its stream.

The other half of ``openai_responses`` (items ↔ transcript): a ``response``
object, or the ``response.*`` events of a stream, become the ``Reply`` the
proxy stores — the output items of one turn as one assistant message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .common import ConversionError, Reply, Usage, as_int
from .openai_responses import assistant_from_items, item_kind
from .sse import SseEvent

# --- responses ----------------------------------------------------------------------


def usage_from_responses(usage: dict[str, Any] | None) -> Usage:
    """Responses usage in the service's terms: cached input tokens are cache reads."""
    usage = usage or {}
    total = as_int(usage.get("input_tokens"))
    cached = as_int((usage.get("input_tokens_details") or {}).get("cached_tokens"))
    return Usage(
        input_tokens=max(0, total - cached),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=min(cached, total),
    )


def reply_from_output(
    output: Sequence[dict[str, Any]], usage: dict[str, Any] | None, **fields: Any
) -> Reply:
    items = [item for item in output if isinstance(item, dict)]
    message = assistant_from_items(items) if items else {"role": "assistant", "content": ""}
    return Reply(message=message, usage=usage_from_responses(usage), **fields)


def reply_from_response(response: dict[str, Any]) -> Reply:
    """A non-streaming ``response`` object → its output as one assistant message + usage."""
    output = response.get("output")
    if not isinstance(output, list):
        raise ConversionError("Field required", "output")
    return reply_from_output(
        output,
        response.get("usage"),
        stop_reason=response.get("status"),
        id=response.get("id"),
        model=response.get("model"),
    )


# --- streams --------------------------------------------------------------------------


class ResponsesStream:
    """Accumulates a Responses stream (``response.created`` … ``response.completed``).

    Fed the parsed ``data`` of each event (``sse.SseEvent.json()``). Items are
    taken whole from ``response.output_item.done``; the ``response.completed``
    (or ``.incomplete``) response's ``output`` and ``usage`` are authoritative.
    Cut short, a text message that had started keeps its text; a call, a
    reasoning item or any other unfinished item is left out (the provider would
    reject it sent back).
    """

    FINAL = ("response.completed", "response.incomplete", "response.failed")

    def __init__(self) -> None:
        self.done = False
        self.error: dict[str, Any] | None = None
        self.response: dict[str, Any] = {}
        self._items: dict[int, dict[str, Any]] = {}
        self._finished: set[int] = set()
        self._texts: dict[int, list[str]] = {}

    def feed(self, event: SseEvent | dict[str, Any]) -> None:
        if isinstance(event, SseEvent):
            try:
                data = event.json()
            except ValueError:
                return
        else:
            data = event
        if not isinstance(data, dict):
            return
        kind = data.get("type")
        index = data.get("output_index")
        if kind == "response.created" or kind == "response.in_progress":
            self.response = dict(data.get("response") or {})
        elif kind == "response.output_item.added" and isinstance(index, int):
            self._items[index] = dict(data.get("item") or {})
        elif kind == "response.output_text.delta" and isinstance(index, int):
            self._texts.setdefault(index, []).append(str(data.get("delta") or ""))
        elif kind == "response.output_item.done" and isinstance(index, int):
            self._items[index] = dict(data.get("item") or {})
            self._finished.add(index)
        elif kind in self.FINAL:
            self.response = dict(data.get("response") or {})
            self.done = kind != "response.failed"
            if kind == "response.failed":
                self.error = (self.response.get("error") or {}) or {"message": "failed"}
        elif kind == "error":
            self.error = {k: v for k, v in data.items() if k not in ("type", "sequence_number")}

    def output(self) -> list[dict[str, Any]]:
        """The output items so far (the final response's, once it came)."""
        if self.done and isinstance(self.response.get("output"), list):
            return list(self.response["output"])
        out = []
        for index in sorted(self._items):
            item = self._items[index]
            if index in self._finished:
                out.append(item)
            elif item_kind(item) == "message" and self._texts.get(index):
                text = "".join(self._texts[index])
                out.append({**item, "content": [{"type": "output_text", "text": text}]})
        return out

    def result(self, *, incomplete: bool | None = None) -> Reply:
        if incomplete is None:
            incomplete = not self.done
        return reply_from_output(
            self.output(),
            self.response.get("usage"),
            stop_reason=self.response.get("status"),
            id=self.response.get("id"),
            model=self.response.get("model"),
            incomplete=incomplete,
            error=self.error,
        )


# --- answers the proxy writes itself ---------------------------------------------------


def response_object(
    *, response_id: str, model: str, output: list[dict[str, Any]], created_at: int
) -> dict[str, Any]:
    """A completed ``response`` with the given output (no tokens used upstream)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 0,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 0,
        },
    }


def response_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream of a complete ``response`` (text messages and whole items), in the API's order."""
    events: list[dict[str, Any]] = []

    def add(kind: str, **data: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **data})

    start = {**response, "status": "in_progress", "output": []}
    add("response.created", response=start)
    add("response.in_progress", response=start)
    for index, item in enumerate(response["output"]):
        if item.get("type") != "message":
            add("response.output_item.added", output_index=index, item=item)
            add("response.output_item.done", output_index=index, item=item)
            continue
        add("response.output_item.added", output_index=index, item={**item, "content": []})
        for k, part in enumerate(item.get("content") or ()):
            where = {"item_id": item.get("id"), "output_index": index, "content_index": k}
            add("response.content_part.added", **where, part={**part, "text": ""})
            add("response.output_text.delta", **where, delta=part.get("text", ""), logprobs=[])
            add("response.output_text.done", **where, text=part.get("text", ""), logprobs=[])
            add("response.content_part.done", **where, part=part)
        add("response.output_item.done", output_index=index, item=item)
    add("response.completed", response=response)
    return events
