"""A small local HTTP server speaking the OpenAI Responses API (``POST /v1/responses``).

For tests and the bench: the official ``openai`` SDK, the Agents SDK, Codex
CLI or the proxy are pointed at ``f"{fake.base_url}/v1"``. It

- checks each request with ``fakes.responses_rules`` and answers as the
  API does: ``400`` with ``{"error": {"message", "type", "param", "code"}}``,
  ``401`` ``invalid_api_key`` for a wrong ``Authorization: Bearer`` key;
- refuses an input estimated above ``window`` tokens with
  ``context_length_exceeded``;
- answers scripted replies (``script(ScriptedReply(...))``: text, function
  calls, ``thinking`` as a ``reasoning`` item with an ``encrypted_content``
  the fake issues and later insists on getting back verbatim), else a text
  reply, or the ``responder``'s (a callable given the body that returns a
  ``ScriptedReply``: a scripted agent such as Codex's tool loop);
- ``stream: true`` sends the documented event sequence (``response.created``,
  ``response.in_progress``, per item ``response.output_item.added`` / the
  deltas / ``response.output_item.done``, ``response.completed`` with usage),
  each with its ``sequence_number``;
- reports cached input tokens by prefix, records every request.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from fakes.anthropic_server import RecordedRequest
from fakes.prompt_cache import PrefixCache
from fakes.responses_rules import InvalidResponsesRequest, validate_responses
from fakes.streams import QuietServer, ScriptedReply, send_stream


def estimate_tokens(body: dict[str, Any]) -> int:
    """The fake's token count of a request's input (JSON characters / 4)."""
    keys = ("input", "tools", "instructions")
    return max(1, len(json.dumps({k: body.get(k) for k in keys})) // 4)


def _last_user_text(body: dict[str, Any]) -> str:
    items = body.get("input")
    if isinstance(items, str):
        return items
    for item in reversed(items or []):
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return " ".join(str(p.get("text", "")) for p in content or ())
    return ""


def default_responder(body: dict[str, Any]) -> ScriptedReply:
    return ScriptedReply(text=f"Fake reply to: {_last_user_text(body)[:200]}")


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


@dataclass
class FakeResponses:
    """Start with ``start()`` (or as a context manager); the SDK's base URL is ``base_url + "/v1"``."""

    api_key: str = "test-key"
    responder: Callable[[dict[str, Any]], ScriptedReply] = default_responder
    window: int | None = None
    cache_minimum: int = 1024
    stream_delay: float = 0.0
    cut_stream_after: int | None = None  # frames sent before the connection drops
    requests: list[RecordedRequest] = field(default_factory=list)
    issued: set[str] = field(default_factory=set)
    _script: deque[ScriptedReply] = field(default_factory=deque)
    _failures: deque[int] = field(default_factory=deque)
    _cache: PrefixCache = field(default_factory=PrefixCache)
    _server: QuietServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *replies: ScriptedReply) -> None:
        with self._lock:
            self._script.extend(replies)

    def fail_next(self, status: int) -> None:
        with self._lock:
            self._failures.append(status)

    def responses_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/v1/responses")]

    def _next_reply(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        return self.responder(body)

    def issue(self, text: str) -> str:
        """An opaque token the fake will accept back (reasoning, compaction)."""
        token = "enc_" + hashlib.sha256(text.encode()).hexdigest()
        with self._lock:
            self.issued.add(token)
        return token

    def output(self, reply: ScriptedReply, number: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if reply.thinking is not None:
            items.append(
                {
                    "id": f"rs_fake_{number}",
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": reply.thinking}],
                    "encrypted_content": self.issue(f"{number}:{reply.thinking}"),
                }
            )
        if reply.text or not reply.tool_calls:
            text = {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
            items.append(
                {
                    "id": f"msg_fake_{number}",
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [text],
                }
            )
        for k, call in enumerate(reply.tool_calls):
            items.append(
                {
                    "id": f"fc_fake_{number}_{k}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call.get("id") or f"call_fake_{number}_{k}",
                    "name": call["name"],
                    "arguments": json.dumps(call.get("arguments") or {}),
                }
            )
        return items

    def response(self, body: dict[str, Any], number: int) -> dict[str, Any]:
        reply = self._next_reply(body)
        output = self.output(reply, number)
        items = body["input"] if isinstance(body["input"], list) else [body["input"]]
        prompt = estimate_tokens(body)
        cached = self._cache.longest_seen(
            [body.get("instructions"), *items], minimum=self.cache_minimum
        )
        out_tokens = max(1, len(json.dumps(output)) // 4)
        return {
            "id": f"resp_fake_{number}_{int(time.time() * 1000)}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "metadata": body.get("metadata") or {},
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": min(cached, prompt)},
                "output_tokens": out_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + out_tokens,
            },
        }

    def start(self) -> FakeResponses:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in two writes: without TCP_NODELAY the second waits
            # for the client's delayed ACK (40 ms a call on a kept-alive connection).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                return

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("x-request-id", f"req_fake_{len(fake.requests)}")
                self.end_headers()
                self.wfile.write(data)

            def _error(
                self, record: RecordedRequest, status: int, message: str, **error: Any
            ) -> None:
                record.status, record.error = status, message
                kind = {401: "invalid_request_error", 429: "requests"}.get(
                    status, "invalid_request_error" if status < 500 else "server_error"
                )
                body = {"message": message, "type": kind, "param": None, "code": None}
                body.update(error)
                self._send(status, {"error": body})

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                record = RecordedRequest(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=None,
                )
                with fake._lock:
                    fake.requests.append(record)
                    failure = fake._failures.popleft() if fake._failures else None
                if self.path.split("?")[0] != "/v1/responses":
                    return self._error(record, 404, f"Invalid URL (POST {self.path})")
                if record.headers.get("authorization") != f"Bearer {fake.api_key}":
                    return self._error(
                        record, 401, "Incorrect API key provided.", code="invalid_api_key"
                    )
                try:
                    record.body = json.loads(raw or b"null")
                    assert isinstance(record.body, dict)
                except (json.JSONDecodeError, AssertionError):
                    return self._error(record, 400, "We could not parse the JSON body.")
                if failure is not None:
                    return self._error(record, failure, f"fake failure {failure}")
                try:
                    validate_responses(record.body, fake.issued)
                except InvalidResponsesRequest as exc:
                    return self._error(record, 400, str(exc), param=exc.param)
                tokens = estimate_tokens(record.body)
                if fake.window is not None and tokens > fake.window:
                    return self._error(
                        record,
                        400,
                        "Your input exceeds the context window of this model. Please adjust "
                        "your input and try again.",
                        code="context_length_exceeded",
                        param="input",
                    )
                response = fake.response(record.body, len(fake.requests))
                record.status = 200
                if not record.body.get("stream"):
                    return self._send(200, response)
                send_stream(
                    self,
                    stream_frames(response),
                    delay=fake.stream_delay,
                    cut_after=fake.cut_stream_after,
                )

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-responses",
            daemon=True,
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeResponses:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def stream_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a complete ``response``, in the API's order."""
    events: list[dict[str, Any]] = []

    def add(kind: str, **data: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **data})

    start = {**response, "status": "in_progress", "output": [], "usage": None}
    add("response.created", response=start)
    add("response.in_progress", response=start)
    for index, item in enumerate(response["output"]):
        kind = item["type"]
        if kind == "message":
            add("response.output_item.added", output_index=index,
                item={**item, "status": "in_progress", "content": []})  # fmt: skip
            part = item["content"][0]
            empty = {**part, "text": ""}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            add("response.content_part.added", **where, part=empty)
            for piece in _pieces(part["text"]):
                add("response.output_text.delta", **where, delta=piece, logprobs=[])
            add("response.output_text.done", **where, text=part["text"], logprobs=[])
            add("response.content_part.done", **where, part=part)
        elif kind == "function_call":
            add("response.output_item.added", output_index=index,
                item={**item, "status": "in_progress", "arguments": ""})  # fmt: skip
            for piece in _pieces(item["arguments"]):
                add("response.function_call_arguments.delta", item_id=item["id"],
                    output_index=index, delta=piece)  # fmt: skip
            add("response.function_call_arguments.done", item_id=item["id"],
                output_index=index, arguments=item["arguments"], name=item["name"])  # fmt: skip
        else:
            add("response.output_item.added", output_index=index,
                item={**item, "summary": [], "encrypted_content": None})  # fmt: skip
        add("response.output_item.done", output_index=index, item=item)
    add("response.completed", response=response)
    return events


def stream_frames(response: dict[str, Any]) -> list[bytes]:
    return [
        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in stream_events(response)
    ]
