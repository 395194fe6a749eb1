"""A small local HTTP server speaking the Anthropic Messages API (``POST /v1/messages``).

For tests and the bench: the official SDK is pointed at it with ``base_url``.
It checks requests with the real API's rules (``fakes.anthropic_rules``) and
answers ``400 invalid_request_error`` with its wording.

It accepts ``x-api-key`` or ``Authorization: Bearer`` (what SDK 2.x sends),
requires ``anthropic-version``, records every request, and can be told to
fail the next calls (429 / 500 / 529, with ``retry-after-ms`` so the SDK's own
retries are quick) or to answer after a delay.

For the proxy's tests it also speaks the rest of what a client uses:

- ``stream: true``: the exact event sequence of the API (``fakes.streams``),
  text, thinking and ``tool_use`` blocks, usage with the cache fields; it can
  pause between events (``stream_delay``) or drop the connection after N of
  them (``cut_stream_after``);
- ``POST /v1/messages/count_tokens`` and ``GET /v1/models``;
- ``window``: a request estimated above it gets the API's ``400
  invalid_request_error`` "prompt is too long: N tokens > M maximum";
- scripted replies: ``script(ScriptedReply(...))`` queues what the model says
  next (text, tool calls, thinking); with none queued the responder answers;
- ``cache_control`` markers are honoured like a prompt cache
  (``cache_creation_input_tokens`` / ``cache_read_input_tokens``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fakes.anthropic_rules import OLDER_MODELS, InvalidRequest, message_blocks, validate
from fakes.prompt_cache import PrefixCache, anthropic_blocks
from fakes.streams import (
    QuietServer,
    ScriptedReply,
    anthropic_content,
    anthropic_events,
    anthropic_frame,
    send_stream,
)

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

Responder = Callable[[dict[str, Any]], str]


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    status: int = 0
    error: str | None = None
    # When it arrived (time.monotonic()): the bench reads the gaps between calls.
    at: float = field(default_factory=time.monotonic)


def default_responder(body: dict[str, Any]) -> str:
    """A deterministic answer: <retain>/<summary> for an interrupt, plain text otherwise."""
    messages = body["messages"]
    texts = [
        b.get("text", "") for m in messages for b in message_blocks(m) if b.get("type") == "text"
    ]
    last = texts[-1] if texts else ""
    first_user = next(
        (
            b.get("text", "")
            for m in messages
            if m["role"] == "user"
            for b in message_blocks(m)
            if b.get("text")
        ),
        "",
    )
    headline = first_user.strip().splitlines()[0][:200] if first_user.strip() else ""
    if "<summary>" in last:
        return (
            f"<retain>\n- First request: {headline}\n</retain>\n"
            f"<summary>\nFake summary of {len(messages) - 1} messages."
            f" First request: {headline}\n</summary>"
        )
    return f"Fake compressed summary. First request: {headline}"


MODELS = ("claude-fake-large", "claude-fake-small")


def estimate_tokens(body: dict[str, Any]) -> int:
    """The fake's token count of a request's prompt (JSON characters / 4)."""
    prompt = {k: body.get(k) for k in ("system", "messages", "tools")}
    return max(1, len(json.dumps(prompt)) // 4)


@dataclass
class FakeAnthropic:
    """Start with ``start()`` (or as a context manager); point the SDK at ``base_url``."""

    api_key: str = "test-key"
    responder: Responder = default_responder
    delay: float = 0.0
    requests: list[RecordedRequest] = field(default_factory=list)
    _failures: deque[tuple[int, str]] = field(default_factory=deque)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    window: int | None = None
    stream_delay: float = 0.0
    cut_stream_after: int | None = None
    _cuts: deque[int] = field(default_factory=deque)  # one-shot cuts (``cut_next``)
    models: tuple[str, ...] = MODELS
    # Model-name prefixes that reject a system message inside ``messages``.
    no_mid_system: tuple[str, ...] = OLDER_MODELS
    _script: deque[ScriptedReply] = field(default_factory=deque)
    _cache: PrefixCache = field(default_factory=PrefixCache)
    # Answers as an agent when nothing is scripted (``fakes.claude_code``):
    # the reply for a request body, tool calls included.
    agent: Callable[[dict[str, Any]], ScriptedReply] | None = None

    def script(self, *replies: ScriptedReply) -> None:
        """Queue what the model answers to the next requests, in order."""
        with self._lock:
            self._script.extend(replies)

    def _next_reply(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.agent is not None:
            return self.agent(body)
        return ScriptedReply(text=self.responder(body))

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next(self, status: int, count: int = 1, message: str = "") -> None:
        with self._lock:
            for _ in range(count):
                self._failures.append((status, message or f"fake failure {status}"))

    def cut_next(self, after: int, count: int = 1) -> None:
        """The next ``count`` streams drop the connection after ``after`` events."""
        with self._lock:
            self._cuts.extend([after] * count)

    def messages_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/v1/messages")]

    def start(self) -> FakeAnthropic:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in two writes: without TCP_NODELAY the second waits
            # for the client's delayed ACK (40 ms a call on a kept-alive connection).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                return

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_fake_{len(fake.requests)}")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, record: RecordedRequest, status: int, message: str) -> None:
                record.status, record.error = status, message
                headers = {"retry-after-ms": "1"} if status in (429, 500, 529) else {}
                if status in (429, 500, 529):
                    headers["x-should-retry"] = "true"
                self._send(
                    status,
                    {
                        "type": "error",
                        "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message},
                    },
                    headers,
                )

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
                if not self.path.startswith("/v1/messages"):
                    return self._error(record, 404, f"Not found: {self.path}")
                key = record.headers.get("x-api-key")
                bearer = record.headers.get("authorization", "")
                if key != fake.api_key and bearer != f"Bearer {fake.api_key}":
                    return self._error(record, 401, "invalid x-api-key")
                if not record.headers.get("anthropic-version"):
                    return self._error(record, 400, "anthropic-version: header is required")
                try:
                    record.body = json.loads(raw or b"null")
                except json.JSONDecodeError as exc:
                    return self._error(record, 400, f"Invalid JSON: {exc}")
                if not isinstance(record.body, dict):
                    return self._error(record, 400, "Request body must be a JSON object")
                if failure is not None:
                    return self._error(record, failure[0], failure[1])
                if self.path.startswith("/v1/messages/count_tokens"):
                    return self._count_tokens(record)
                try:
                    validate(record.body, fake.no_mid_system)
                except InvalidRequest as exc:
                    return self._error(record, 400, str(exc))
                tokens = estimate_tokens(record.body)
                if fake.window is not None and tokens > fake.window:
                    return self._error(
                        record, 400, f"prompt is too long: {tokens} tokens > {fake.window} maximum"
                    )
                if fake.delay:
                    time.sleep(fake.delay)
                number = len(fake.requests)
                reply = fake._next_reply(record.body)
                content = anthropic_content(reply, number)
                written, read = fake._cache.lookup(*anthropic_blocks(record.body))
                text = "".join(b.get("text", "") for b in content if b["type"] == "text")
                message = {
                    "id": f"msg_fake_{number}",
                    "type": "message",
                    "role": "assistant",
                    "model": record.body["model"],
                    "content": content,
                    "stop_reason": reply.stop_reason
                    or ("tool_use" if reply.tool_calls else "end_turn"),
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": max(1, len(raw) // 4 - written - read),
                        "cache_creation_input_tokens": written,
                        "cache_read_input_tokens": read,
                        "output_tokens": max(1, len(text or json.dumps(content)) // 4),
                    },
                }
                record.status = 200
                if record.body.get("stream"):
                    frames = [anthropic_frame(e) for e in anthropic_events(message)]
                    with fake._lock:
                        cut = fake._cuts.popleft() if fake._cuts else fake.cut_stream_after
                    return send_stream(
                        self,
                        frames,
                        headers={"request-id": f"req_fake_{number}"},
                        delay=fake.stream_delay,
                        cut_after=cut,
                    )
                self._send(200, message)

            def _authorized(self, record: RecordedRequest) -> bool:
                key = record.headers.get("x-api-key")
                bearer = record.headers.get("authorization", "")
                return key == fake.api_key or bearer == f"Bearer {fake.api_key}"

            def _count_tokens(self, record: RecordedRequest) -> None:
                try:
                    # it takes no max_tokens
                    validate({"max_tokens": 1, **record.body}, fake.no_mid_system)
                except InvalidRequest as exc:
                    return self._error(record, 400, str(exc))
                record.status = 200
                self._send(200, {"input_tokens": estimate_tokens(record.body)})

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                record = RecordedRequest(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=None,
                )
                with fake._lock:
                    fake.requests.append(record)
                if self.path.split("?")[0] != "/v1/models":
                    return self._error(record, 404, f"Not found: {self.path}")
                if not self._authorized(record):
                    return self._error(record, 401, "invalid x-api-key")
                data = [
                    {
                        "type": "model",
                        "id": model,
                        "display_name": model.replace("-", " ").title(),
                        "created_at": "2025-09-29T00:00:00Z",
                    }
                    for model in fake.models
                ]
                record.status = 200
                self._send(
                    200,
                    {
                        "data": data,
                        "has_more": False,
                        "first_id": data[0]["id"] if data else None,
                        "last_id": data[-1]["id"] if data else None,
                    },
                )

        # Quiet about clients that hang up (timeouts, disconnects mid-stream).
        self._server = QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            # A short poll interval: shutdown() waits for one.
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-anthropic",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
