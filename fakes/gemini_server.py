"""A small local HTTP server speaking the Gemini API (``/v1beta/models/…``).

For tests: a client (the Google Gen AI SDK, Gemini CLI) is pointed at it with
its base URL. It serves ``POST /v1beta/models/{model}:generateContent``,
``:streamGenerateContent?alt=sse``, ``:countTokens`` and ``GET /v1beta/models``;
it takes the key as ``x-goog-api-key`` or ``?key=`` (none: 403, a wrong one:
the API's 400 "API key not valid"), checks every body with the API's rules
(``fakes.gemini_rules``) and refuses in the API's error shape
``{"error": {"code", "message", "status"}}``:

- ``window``: a prompt estimated above it gets the API's 400 "The input token
  count (N) exceeds the maximum number of tokens allowed (M).";
- scripted replies: ``script(ScriptedReply(...))`` queues what the model says
  next (text, function calls, thoughts); with none queued the responder
  answers. Calls carry no ``id`` unless the script gives one (the Gemini API
  sends none);
- a stream is one ``GenerateContentResponse`` per ``data:`` event: text in
  pieces, each call whole in its own chunk, ``finishReason`` and the final
  usage in the last chunk; ``cut_next`` drops the connection after N events;
- failures on demand: ``fail_next(status)`` (a 429 carries the API's
  ``RetryInfo`` detail with a short ``retryDelay``, so a client's retry is
  quick) and ``hang_next(seconds)`` (a client timeout);
- implicit caching as the API reports it: ``usageMetadata.cachedContentTokenCount``
  (part of ``promptTokenCount``) is the longest prefix of blocks (system
  instruction, tools, each content) seen in an earlier request, from
  ``cache_minimum`` tokens on; absent when nothing was read.
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
from urllib.parse import parse_qs, urlsplit

from fakes.anthropic_server import RecordedRequest
from fakes.gemini_rules import InvalidArgument, validate
from fakes.prompt_cache import PrefixCache
from fakes.streams import QuietServer, ScriptedReply, send_stream

STATUSES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
MODELS = ("gemini-fake-pro", "gemini-fake-flash")
# The API's 429 says when to retry; the fake's delay is short, so a client's retry is quick.
RETRY_INFO = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.01s"}
PREFIX = "/v1beta/models"

Responder = Callable[[dict[str, Any]], str]


def estimate_tokens(body: dict[str, Any]) -> int:
    """The fake's token count of a request's prompt (JSON characters / 4)."""
    prompt = {k: body.get(k) for k in ("systemInstruction", "contents", "tools")}
    return max(1, len(json.dumps(prompt)) // 4)


def _texts(body: dict[str, Any], role: str | None = None) -> list[str]:
    return [
        p["text"]
        for c in body.get("contents") or ()
        if role is None or c.get("role", "user") == role
        for p in c.get("parts") or ()
        if isinstance(p.get("text"), str) and not p.get("thought")
    ]


def default_responder(body: dict[str, Any]) -> str:
    """A deterministic answer: <retain>/<summary> when asked for a summary, else plain text."""
    texts = _texts(body)
    users = [t for t in _texts(body, "user") if t.strip()]
    headline = users[0].strip().splitlines()[0][:200] if users else ""
    if texts and "<summary>" in texts[-1]:
        return (
            f"<retain>\n- First request: {headline}\n</retain>\n"
            f"<summary>\nFake summary of {len(body['contents']) - 1} turns."
            f" First request: {headline}\n</summary>"
        )
    return f"Fake Gemini answer. First request: {headline}"


def reply_parts(reply: ScriptedReply) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if reply.thinking is not None:
        parts.append({"text": reply.thinking, "thought": True})
    if reply.text or not reply.tool_calls:
        parts.append({"text": reply.text})
    for call in reply.tool_calls:
        function: dict[str, Any] = {"name": call["name"], "args": call.get("arguments") or {}}
        if call.get("id"):
            function["id"] = call["id"]
        parts.append({"functionCall": function})
    return parts


def stream_chunks(response: dict[str, Any], chunk_chars: int = 7) -> list[dict[str, Any]]:
    """A complete response as the API streams it (module doc)."""
    head = {k: response[k] for k in ("modelVersion", "responseId")}
    usage = response["usageMetadata"]
    running = {k: usage[k] for k in ("promptTokenCount", "cachedContentTokenCount") if k in usage}
    candidate = response["candidates"][0]
    chunks = []
    for part in candidate["content"]["parts"]:
        text = part.get("text")
        pieces = (
            [{**part, "text": text[i : i + chunk_chars]} for i in range(0, len(text), chunk_chars)]
            if isinstance(text, str) and text
            else [part]
        )
        for piece in pieces:
            content = {"role": "model", "parts": [piece]}
            chunks.append(
                {"candidates": [{"content": content, "index": 0}], "usageMetadata": running, **head}
            )
    chunks[-1] = {
        **chunks[-1],
        "candidates": [{**chunks[-1]["candidates"][0], "finishReason": candidate["finishReason"]}],
        "usageMetadata": usage,
    }
    return chunks


@dataclass
class FakeGemini:
    """Start with ``start()`` (or as a context manager); point the client at ``base_url``."""

    api_key: str = "test-key"
    responder: Responder = default_responder
    # A scripted agent (``fakes.gemini_cli.ShellSteps``): answers every request it gets,
    # after the queued replies.
    agent: Callable[[dict[str, Any]], ScriptedReply] | None = None
    window: int | None = None
    # The API's minimum for implicit caching (Gemini 2.5 Flash's).
    cache_minimum: int = 1024
    models: tuple[str, ...] = MODELS
    requests: list[RecordedRequest] = field(default_factory=list)
    _script: deque[ScriptedReply] = field(default_factory=deque)
    _failures: deque[tuple[int, str]] = field(default_factory=deque)
    _cuts: deque[int] = field(default_factory=deque)
    _hangs: deque[float] = field(default_factory=deque)
    _cache: PrefixCache = field(default_factory=PrefixCache)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: QuietServer | None = None
    _thread: threading.Thread | None = None

    def script(self, *replies: ScriptedReply) -> None:
        """Queue what the model answers to the next requests, in order."""
        with self._lock:
            self._script.extend(replies)

    def fail_next(self, status: int, count: int = 1, message: str = "") -> None:
        with self._lock:
            self._failures.extend([(status, message or f"fake failure {status}")] * count)

    def hang_next(self, seconds: float, count: int = 1) -> None:
        """The next ``count`` requests wait ``seconds`` before they are answered."""
        with self._lock:
            self._hangs.extend([seconds] * count)

    def cut_next(self, after: int, count: int = 1) -> None:
        """The next ``count`` streams drop the connection after ``after`` events."""
        with self._lock:
            self._cuts.extend([after] * count)

    def _next_reply(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.agent is not None:
            return self.agent(body)
        return ScriptedReply(text=self.responder(body))

    def generate_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if "Content" in r.path]

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def respond(self, body: dict[str, Any], model: str, number: int) -> dict[str, Any]:
        """The ``GenerateContentResponse`` to a valid body (raises ``InvalidArgument``)."""
        validate(body)
        tokens = estimate_tokens(body)
        if self.window is not None and tokens > self.window:
            raise InvalidArgument(
                f"The input token count ({tokens}) exceeds the maximum number of tokens"
                f" allowed ({self.window})."
            )
        reply = self._next_reply(body)
        parts = reply_parts(reply)
        out_tokens = max(1, len(json.dumps(parts)) // 4)
        thoughts = len(reply.thinking or "") // 4
        usage = {
            "promptTokenCount": tokens,
            "candidatesTokenCount": out_tokens,
            "totalTokenCount": tokens + out_tokens + thoughts,
        }
        blocks = [
            ["system", body.get("systemInstruction")],
            ["tools", body.get("tools")],
            *body["contents"],
        ]
        cached = min(self._cache.longest_seen(blocks, minimum=self.cache_minimum), tokens)
        if cached:
            usage["cachedContentTokenCount"] = cached
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": parts},
                    "finishReason": reply.stop_reason or "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": f"fake-response-{number}",
        }

    def start(self) -> FakeGemini:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                return

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json; charset=UTF-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, record: RecordedRequest, status: int, message: str) -> None:
                record.status, record.error = status, message
                error: dict[str, Any] = {
                    "code": status,
                    "message": message,
                    "status": STATUSES.get(status, ""),
                }
                if status == 429:
                    error["details"] = [RETRY_INFO]
                self._send(status, {"error": error})

            def _record(self, body: Any = None) -> RecordedRequest:
                record = RecordedRequest(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                with fake._lock:
                    fake.requests.append(record)
                return record

            def _key_refused(self, record: RecordedRequest) -> bool:
                query = parse_qs(urlsplit(self.path).query)
                key = record.headers.get("x-goog-api-key") or (query.get("key") or [None])[0]
                if key is None:
                    self._error(record, 403, "Method doesn't allow unregistered callers.")
                elif key != fake.api_key:
                    self._error(record, 400, "API key not valid. Please pass a valid API key.")
                return key != fake.api_key

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                record = self._record()
                url = urlsplit(self.path)
                model, _, method = url.path.removeprefix(PREFIX + "/").partition(":")
                if not url.path.startswith(PREFIX + "/") or method not in (
                    "generateContent",
                    "streamGenerateContent",
                    "countTokens",
                ):
                    return self._error(record, 404, f"Not found: {url.path}")
                if self._key_refused(record):
                    return None
                try:
                    record.body = json.loads(raw or b"null")
                except json.JSONDecodeError as exc:
                    return self._error(record, 400, f"Invalid JSON payload received. {exc}")
                if not isinstance(record.body, dict):
                    return self._error(record, 400, "Invalid JSON payload received.")
                with fake._lock:
                    failure = fake._failures.popleft() if fake._failures else None
                    hang = fake._hangs.popleft() if fake._hangs else 0.0
                if hang:
                    time.sleep(hang)
                if failure is not None:
                    return self._error(record, *failure)
                if method == "countTokens":
                    return self._count(record)
                number = len(fake.requests)
                try:
                    response = fake.respond(record.body, model, number)
                except InvalidArgument as exc:
                    return self._error(record, 400, str(exc))
                record.status = 200
                if method == "generateContent":
                    return self._send(200, response)
                sse = parse_qs(url.query).get("alt") == ["sse"]
                frames = [
                    (f"data: {json.dumps(c)}\r\n\r\n" if sse else json.dumps(c)).encode()
                    for c in stream_chunks(response)
                ]
                if not sse:  # without alt=sse the API streams one JSON array
                    frames = [b"[" + b",\r\n".join(frames) + b"]"]
                with fake._lock:
                    cut = fake._cuts.popleft() if fake._cuts else None
                return send_stream(self, frames, cut_after=cut)

            def _count(self, record: RecordedRequest) -> None:
                body = record.body or {}
                request = body.get("generateContentRequest") or body
                try:
                    validate(request)
                except InvalidArgument as exc:
                    return self._error(record, 400, str(exc))
                record.status = 200
                self._send(200, {"totalTokens": estimate_tokens(request)})

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                record = self._record()
                if urlsplit(self.path).path.rstrip("/") != PREFIX:
                    return self._error(record, 404, f"Not found: {self.path}")
                if self._key_refused(record):
                    return None
                record.status = 200
                models = [
                    {
                        "name": f"models/{model}",
                        "displayName": model.replace("-", " ").title(),
                        "inputTokenLimit": fake.window or 1_048_576,
                        "outputTokenLimit": 65_536,
                        "supportedGenerationMethods": ["generateContent", "countTokens"],
                    }
                    for model in fake.models
                ]
                self._send(200, {"models": models})

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-gemini",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGemini:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
