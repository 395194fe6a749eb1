"""Stream filters: the client's view of a stream whose built-in tool calls the proxy answers itself.

When the proxy may run built-in tools, a stream is relayed event by event
(not chunk by chunk) through its provider's filter (``providers.<api>_stream``;
this module holds what they share): the events of a built-in call are
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


def frame(event: SseEvent, data: Any = None) -> bytes:
    """One event as SSE text (``data`` replaces the event's own when given)."""
    text = event.data if data is None else json.dumps(data, separators=(",", ":"))
    head = f"event: {event.event}\n" if event.event != "message" else ""
    return f"{head}data: {text}\n\n".encode()


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


def joined(reports: dict[int, list[str]]) -> list[str]:
    """Each held final-report call's arguments, its pieces joined."""
    return ["".join(pieces) for pieces in reports.values()]


def without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}
