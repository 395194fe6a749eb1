"""A small local HTTP server speaking OpenAI Chat Completions (``POST /v1/chat/completions``).

For tests and the bench: the official ``openai`` SDK (or the proxy) is pointed
at it with ``base_url=f"{fake.base_url}/v1"``. It

- checks each request with ``fakes.openai_rules.validate_chat`` and
  answers what the API answers: ``400`` with the real error shape
  ``{"error": {"message", "type", "param", "code"}}``, ``401`` with
  ``invalid_api_key`` for a wrong ``Authorization: Bearer`` key;
- refuses a prompt estimated above ``window`` tokens with
  ``context_length_exceeded`` (the API's wording);
- answers scripted replies (``script(ScriptedReply(...))``: text or tool
  calls), else its ``agent``'s reply (a scripted agent such as
  ``fakes.opencode.ShellSteps``), else the responder's text; ``stream: true`` sends the chunk stream
  (``fakes.streams``), with the usage chunk when
  ``stream_options.include_usage`` asks for it, then ``[DONE]``;
- can be told to fail the next calls (``fail_next(429 | 500 | 503)``, with
  ``retry-after-ms`` so the SDK's retries are quick) or to hang before
  answering (``hang_next(seconds)``: a client timeout);
- reports cached prompt tokens as OpenAI's automatic cache would
  (``prompt_tokens_details.cached_tokens``: the longest message prefix seen
  before, from ``cache_minimum`` tokens on);
- serves ``GET /v1/models`` and records every request.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from fakes.anthropic_server import RecordedRequest
from fakes.openai_rules import InvalidChatRequest, validate_chat
from fakes.prompt_cache import PrefixCache
from fakes.streams import (
    QuietServer,
    ScriptedReply,
    openai_chunks,
    openai_frame,
    openai_message,
    send_stream,
)

MODELS = ("gpt-fake-large", "gpt-fake-small")
ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "unknown_url"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


def estimate_tokens(body: dict[str, Any]) -> int:
    """The fake's token count of a request's prompt (JSON characters / 4)."""
    return max(1, len(json.dumps({k: body.get(k) for k in ("messages", "tools")})) // 4)


def default_responder(body: dict[str, Any]) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    last = users[-1].get("content") if users else ""
    if isinstance(last, list):
        last = " ".join(p.get("text", "") for p in last if p.get("type") == "text")
    return f"Fake reply to: {str(last)[:200]}"


@dataclass
class FakeOpenAI:
    """Start with ``start()`` (or as a context manager); the SDK's base URL is ``base_url + "/v1"``."""

    api_key: str = "test-key"
    responder: Callable[[dict[str, Any]], str] = default_responder
    # A scripted agent: answers every request after the queued replies.
    agent: Callable[[dict[str, Any]], ScriptedReply] | None = None
    window: int | None = None
    cache_minimum: int = 1024
    stream_delay: float = 0.0
    cut_stream_after: int | None = None
    models: tuple[str, ...] = MODELS
    requests: list[RecordedRequest] = field(default_factory=list)
    _failures: deque[tuple[int, str]] = field(default_factory=deque)
    _hangs: deque[float] = field(default_factory=deque)
    _script: deque[ScriptedReply] = field(default_factory=deque)
    _cache: PrefixCache = field(default_factory=PrefixCache)
    _server: QuietServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next(self, status: int, count: int = 1, message: str = "") -> None:
        with self._lock:
            for _ in range(count):
                self._failures.append((status, message or f"fake failure {status}"))

    def hang_next(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._hangs.extend([seconds] * count)

    def script(self, *replies: ScriptedReply) -> None:
        with self._lock:
            self._script.extend(replies)

    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/v1/chat/completions")]

    def _next_reply(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.agent is not None:
            return self.agent(body)
        return ScriptedReply(text=self.responder(body))

    def completion(self, body: dict[str, Any], number: int) -> dict[str, Any]:
        """The ``chat.completion`` object answering ``body``."""
        reply = self._next_reply(body)
        message = openai_message(reply, number)
        prompt = estimate_tokens(body)
        cached = self._cache.longest_seen(body["messages"], minimum=self.cache_minimum)
        output = max(1, len(json.dumps(message)) // 4)
        return {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.stop_reason
                    or ("tool_calls" if reply.tool_calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": output,
                "total_tokens": prompt + output,
                "prompt_tokens_details": {"cached_tokens": min(cached, prompt), "audio_tokens": 0},
                "completion_tokens_details": {
                    "reasoning_tokens": 0,
                    "audio_tokens": 0,
                    "accepted_prediction_tokens": 0,
                    "rejected_prediction_tokens": 0,
                },
            },
        }

    def start(self) -> FakeOpenAI:
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
                self.send_header("x-request-id", f"req_fake_{len(fake.requests)}")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _error(
                self,
                record: RecordedRequest,
                status: int,
                message: str,
                *,
                code: str | None = None,
                param: str | None = None,
            ) -> None:
                record.status, record.error = status, message
                kind, default_code = ERRORS.get(status, ("server_error", None))
                headers = {}
                if status in (429, 500, 503):
                    headers = {"retry-after-ms": "1", "x-should-retry": "true"}
                error = {
                    "message": message,
                    "type": kind,
                    "param": param,
                    "code": code or default_code,
                }
                self._send(status, {"error": error}, headers)

            def _record(self, body: dict[str, Any] | None = None) -> RecordedRequest:
                record = RecordedRequest(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                with fake._lock:
                    fake.requests.append(record)
                return record

            def _authorized(self, record: RecordedRequest) -> bool:
                return record.headers.get("authorization") == f"Bearer {fake.api_key}"

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                record = self._record()
                if self.path.split("?")[0] != "/v1/models":
                    return self._error(record, 404, f"Invalid URL (GET {self.path})")
                if not self._authorized(record):
                    return self._error(record, 401, "Incorrect API key provided.")
                record.status = 200
                data = [
                    {"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}
                    for m in fake.models
                ]
                self._send(200, {"object": "list", "data": data})

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                record = self._record()
                with fake._lock:
                    failure = fake._failures.popleft() if fake._failures else None
                    hang = fake._hangs.popleft() if fake._hangs else 0.0
                if self.path.split("?")[0] != "/v1/chat/completions":
                    return self._error(record, 404, f"Invalid URL (POST {self.path})")
                if not self._authorized(record):
                    return self._error(record, 401, "Incorrect API key provided.")
                try:
                    record.body = json.loads(raw or b"null")
                except json.JSONDecodeError:
                    return self._error(
                        record, 400, "We could not parse the JSON body of your request."
                    )
                if not isinstance(record.body, dict):
                    return self._error(
                        record, 400, "We could not parse the JSON body of your request."
                    )
                if hang:
                    time.sleep(hang)
                if failure is not None:
                    return self._error(record, failure[0], failure[1])
                try:
                    validate_chat(record.body)
                except InvalidChatRequest as exc:
                    return self._error(record, 400, str(exc))
                tokens = estimate_tokens(record.body)
                if fake.window is not None and tokens > fake.window:
                    return self._error(
                        record,
                        400,
                        f"This model's maximum context length is {fake.window} tokens. However,"
                        f" your messages resulted in {tokens} tokens. Please reduce the length of"
                        " the messages.",
                        code="context_length_exceeded",
                        param="messages",
                    )
                completion = fake.completion(record.body, len(fake.requests))
                record.status = 200
                if not record.body.get("stream"):
                    return self._send(200, completion)
                include_usage = bool((record.body.get("stream_options") or {}).get("include_usage"))
                chunks = openai_chunks(completion, include_usage=include_usage)
                frames = [*(openai_frame(c) for c in chunks), openai_frame("[DONE]")]
                send_stream(self, frames, delay=fake.stream_delay, cut_after=fake.cut_stream_after)

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-openai",
            daemon=True,
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
