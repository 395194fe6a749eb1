"""Scripted replies and the SSE streams the fake upstreams send (Anthropic events, OpenAI chunks).

The event sequences follow the providers' documented streams:

- Anthropic: ``message_start`` (usage with the input and cache figures,
  ``output_tokens: 1``), per block ``content_block_start`` / ``*_delta`` /
  ``content_block_stop`` (a ``ping`` after the first start, as the API
  sends), ``message_delta`` (``stop_reason`` and the cumulative usage),
  ``message_stop``; each ``event:`` line names the ``type`` of its data.
- OpenAI: ``chat.completion.chunk`` objects: the role first, content pieces,
  tool calls by ``index`` (id, type and name in the first piece, argument text
  after), a last chunk with ``finish_reason``, with
  ``stream_options.include_usage`` a chunk with empty ``choices`` and the
  usage, then ``data: [DONE]``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ScriptedReply:
    """What the fake model answers next: text, tool calls ``{"name", "arguments"}``, thinking."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    thinking: str | None = None
    stop_reason: str | None = None


def tool_call(name: str, arguments: dict[str, Any] | None = None, id: str | None = None) -> dict:  # noqa: A002 - the field's name
    return {"name": name, "arguments": arguments or {}, "id": id}


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


# --- anthropic -----------------------------------------------------------------


def anthropic_content(reply: ScriptedReply, number: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.thinking is not None:
        signature = hashlib.sha256(reply.thinking.encode()).hexdigest()
        blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": signature})
    if reply.text or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.text})
    for k, call in enumerate(reply.tool_calls):
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_fake_{number}_{k}",
                "name": call["name"],
                "input": call.get("arguments") or {},
            }
        )
    return blocks


def anthropic_events(message: dict[str, Any], chunk_chars: int = 7) -> list[dict[str, Any]]:
    """The stream of a complete Messages response, as the API sends it."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**usage, "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            first = {"type": "text", "text": ""}
            deltas = [
                {"type": "text_delta", "text": p} for p in _pieces(block["text"], chunk_chars)
            ]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": p}
                for p in _pieces(block["thinking"], chunk_chars)
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            first = {**block, "input": {}}
            text = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [
                {"type": "input_json_delta", "partial_json": p} for p in _pieces(text, chunk_chars)
            ]
        else:
            first, deltas = block, []
        events.append({"type": "content_block_start", "index": index, "content_block": first})
        if index == 0:
            events.append({"type": "ping"})
        events.extend({"type": "content_block_delta", "index": index, "delta": d} for d in deltas)
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": usage,
        }
    )
    events.append({"type": "message_stop"})
    return events


def anthropic_frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


# --- openai ---------------------------------------------------------------------


def openai_message(reply: ScriptedReply, number: int) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text if reply.text or not reply.tool_calls else None,
        "refusal": None,
        "annotations": [],
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.get("id") or f"call_fake_{number}_{k}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(call.get("arguments") or {}),
                },
            }
            for k, call in enumerate(reply.tool_calls)
        ]
    return message


def openai_chunks(
    completion: dict[str, Any], *, include_usage: bool, chunk_chars: int = 7
) -> list[dict[str, Any]]:
    """The chunks of a complete ``chat.completion``, as the API streams it."""
    head = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out = {
            **head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            out["usage"] = None
        return out

    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    if message.get("content"):
        chunks += [chunk({"content": p}) for p in _pieces(message["content"], chunk_chars)]
    for index, call in enumerate(message.get("tool_calls") or ()):
        first = {"index": index, "id": call["id"], "type": "function"}
        first["function"] = {"name": call["function"]["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [first]}))
        chunks += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
            for p in _pieces(call["function"]["arguments"], chunk_chars)
        ]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks


def openai_frame(chunk: dict[str, Any] | str) -> bytes:
    data = chunk if isinstance(chunk, str) else json.dumps(chunk)
    return f"data: {data}\n\n".encode()


# --- the wire -------------------------------------------------------------------


def send_stream(
    handler: BaseHTTPRequestHandler,
    frames: list[bytes],
    *,
    headers: dict[str, str] | None = None,
    delay: float = 0.0,
    cut_after: int | None = None,
) -> None:
    """Write ``frames`` as a chunked ``text/event-stream``; ``cut_after`` frames, drop the connection."""
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream; charset=utf-8")
    handler.send_header("cache-control", "no-cache")
    handler.send_header("transfer-encoding", "chunked")
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    for n, frame in enumerate(frames):
        if cut_after is not None and n >= cut_after:
            handler.close_connection = True
            handler.wfile.flush()
            return
        handler.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
        handler.wfile.flush()
        if delay:
            time.sleep(delay)
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


class QuietServer(ThreadingHTTPServer):
    """A threading server that does not print a traceback when a client hangs up.

    Clients that time out or disconnect mid-stream are part of the tests, not errors.
    """

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)
