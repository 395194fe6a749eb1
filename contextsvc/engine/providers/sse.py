"""Server-sent events: an incremental parser and the stream accumulators of both providers.

``SseParser`` takes the response body in chunks as they arrive, split
anywhere (inside a line, between ``\\r`` and ``\\n``, inside a UTF-8
character), and returns the complete events; it follows the WHATWG
event-stream rules: ``\\r\\n``, ``\\n`` or ``\\r`` end a line, ``:`` starts a
comment, several ``data:`` lines join with ``\\n``, one space after the colon
is dropped, an event without data is not dispatched.

The accumulators are fed each event while it is relayed to the client and
return, at the end (or at a disconnect, ``incomplete=True``), the assistant
transcript message and the usage — the same ``Reply`` a non-streaming
response gives. On an incomplete stream, text that arrived is kept; a tool
call or thinking block that had not finished is left out (its arguments or
signature are partial: the provider would reject it sent back). An Anthropic
block is finished at its ``content_block_stop``; an OpenAI tool call when the
next call starts or the choice has its ``finish_reason``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .anthropic import assistant_to_transcript, usage_from_anthropic
from .common import Reply, arguments_from_text
from .openai_chat import assistant_from_choice, usage_from_openai

_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        return json.loads(self.data)


class SseParser:
    """Bytes in (any split), events out. ``close()`` ends the stream."""

    def __init__(self) -> None:
        self._buffer = b""
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._last_id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if not self._started and buffer:
            if len(buffer) < 3 and b"\xef\xbb\xbf".startswith(buffer):
                self._buffer = buffer
                return []
            self._started = True
            if buffer.startswith(b"\xef\xbb\xbf"):
                buffer = buffer[3:]
        events: list[SseEvent] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            if match.group() == b"\r" and match.end() == len(buffer):
                break  # a "\r\n" may be split across chunks: wait for the next byte
            event = self._line(buffer[start : match.start()].decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
            start = match.end()
        self._buffer = buffer[start:]
        return events

    def close(self) -> list[SseEvent]:
        """The events a final ``\\r`` completes; a last event with no blank line after it is dropped."""
        events = []
        if self._buffer.endswith(b"\r"):
            event = self._line(self._buffer[:-1].decode("utf-8", "replace"))
            self._buffer = b""
            if event is not None:
                events.append(event)
        self._buffer = b""
        self._event, self._data = "", []
        return events

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            if not self._data:
                self._event = ""
                return None
            event = SseEvent(
                event=self._event or "message",
                data="\n".join(self._data),
                id=self._last_id,
                retry=self._retry,
            )
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._last_id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None


def _event_data(event: SseEvent | dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(event, dict):
        return event
    try:
        data = json.loads(event.data)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


# --- anthropic ------------------------------------------------------------------


@dataclass(slots=True)
class _Block:
    block: dict[str, Any]
    pieces: list[str] = field(default_factory=list)  # text, thinking or input JSON
    stopped: bool = False


class AnthropicStream:
    """Accumulates a Messages stream (``message_start`` … ``message_stop``)."""

    def __init__(self) -> None:
        self.done = False
        self.error: dict[str, Any] | None = None
        self._message: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}
        self._blocks: dict[int, _Block] = {}
        self._stop_reason: str | None = None

    def feed(self, event: SseEvent | dict[str, Any]) -> None:
        data = _event_data(event)
        if data is None:
            return
        kind = data.get("type")
        if kind == "message_start":
            self._message = data.get("message") or {}
            self._usage.update(self._message.get("usage") or {})
        elif kind == "content_block_start":
            self._blocks[data["index"]] = _Block(dict(data.get("content_block") or {}))
        elif kind == "content_block_delta":
            self._delta(self._blocks.get(data.get("index", -1)), data.get("delta") or {})
        elif kind == "content_block_stop":
            current = self._blocks.get(data.get("index", -1))
            if current is not None:
                current.stopped = True
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            self._stop_reason = delta.get("stop_reason", self._stop_reason)
            # message_delta usage is cumulative: each figure it carries replaces the start's.
            self._usage.update(
                {k: v for k, v in (data.get("usage") or {}).items() if v is not None}
            )
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.error = data.get("error") or {}

    @staticmethod
    def _delta(current: _Block | None, delta: dict[str, Any]) -> None:
        if current is None:
            return
        kind = delta.get("type")
        if kind == "text_delta":
            current.pieces.append(delta.get("text", ""))
        elif kind == "thinking_delta":
            current.pieces.append(delta.get("thinking", ""))
        elif kind == "input_json_delta":
            current.pieces.append(delta.get("partial_json", ""))
        elif kind == "signature_delta":
            current.block["signature"] = delta.get("signature", "")
        elif kind == "citations_delta":
            current.block.setdefault("citations", []).append(delta.get("citation"))

    def result(self, *, incomplete: bool | None = None) -> Reply:
        """The message so far; ``incomplete`` defaults to "no ``message_stop`` seen"."""
        if incomplete is None:
            incomplete = not self.done
        blocks = []
        for index in sorted(self._blocks):
            current = self._blocks[index]
            block = dict(current.block)
            kind = block.get("type")
            if incomplete and not current.stopped and kind != "text":
                continue
            if kind == "text":
                block["text"] = block.get("text", "") + "".join(current.pieces)
            elif kind == "thinking":
                block["thinking"] = block.get("thinking", "") + "".join(current.pieces)
            elif kind == "tool_use" and current.pieces:
                block["input"] = arguments_from_text("".join(current.pieces))
            blocks.append(block)
        return Reply(
            message=assistant_to_transcript(blocks),
            usage=usage_from_anthropic(self._usage),
            stop_reason=self._stop_reason,
            id=self._message.get("id"),
            model=self._message.get("model"),
            incomplete=incomplete,
            error=self.error,
        )


# --- openai ---------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class OpenAIStream:
    """Accumulates a Chat Completions stream of ``chat.completion.chunk`` up to ``[DONE]``.

    Only choice 0 is kept (the proxy asks for one); the usage comes from the
    last chunk (``stream_options.include_usage``), which has no choices.
    """

    def __init__(self) -> None:
        self.done = False
        self.error: dict[str, Any] | None = None
        self._id: str | None = None
        self._model: str | None = None
        self._usage: dict[str, Any] | None = None
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._finish: str | None = None

    def feed(self, event: SseEvent | dict[str, Any]) -> None:
        if isinstance(event, SseEvent) and event.data.strip() == "[DONE]":
            self.done = True
            return
        data = _event_data(event)
        if data is None:
            return
        if isinstance(data.get("error"), dict):
            self.error = data["error"]
            return
        self._id = self._id or data.get("id")
        self._model = self._model or data.get("model")
        if data.get("usage"):
            self._usage = data["usage"]
        for choice in data.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for key, pieces in (
                ("content", self._content),
                ("refusal", self._refusal),
                ("reasoning_content", self._reasoning),
            ):
                if isinstance(delta.get(key), str):
                    pieces.append(delta[key])
            for position, piece in enumerate(delta.get("tool_calls") or ()):
                call = self._calls.setdefault(piece.get("index", position), _Call())
                # Some servers repeat the id and name in every piece: the first one counts.
                call.id = call.id or piece.get("id") or ""
                function = piece.get("function") or {}
                call.name = call.name or function.get("name") or ""
                if isinstance(function.get("arguments"), str):
                    call.arguments.append(function["arguments"])
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]

    def result(self, *, incomplete: bool | None = None) -> Reply:
        """The message so far; ``incomplete`` defaults to "no ``[DONE]`` seen"."""
        if incomplete is None:
            incomplete = not self.done
        message: dict[str, Any] = {"content": "".join(self._content) or None}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        calls = []
        indices = sorted(self._calls)
        if incomplete and self._finish is None and indices:
            # Calls stream one after another: the last may still be taking arguments.
            indices.pop()
        for index in indices:
            call = self._calls[index]
            text = "".join(call.arguments)
            calls.append(
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": text},
                }
            )
        if calls:
            message["tool_calls"] = calls
        return Reply(
            message=assistant_from_choice(message),
            usage=usage_from_openai(self._usage),
            stop_reason=self._finish,
            id=self._id,
            model=self._model,
            incomplete=incomplete,
            error=self.error,
        )
