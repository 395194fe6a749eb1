"""A small local HTTP server speaking the Anthropic Messages API (``POST /v1/messages``).

For tests and the bench: the official SDK is pointed at it with ``base_url``.
It checks requests the way the real API does where it matters to compaction,
and answers ``400 invalid_request_error`` (with the real API's wording where
it is known) when:

- a ``tool_use`` block has no ``tool_result`` for it in the very next message
  (spec 000 §3.4: summarising with a trailing assistant ``tool_calls``);
- a ``tool_result`` answers no ``tool_use`` of the previous message, answers
  one twice, or follows other content in its user message (results come first);
- ``tool_use`` ids repeat within the request or do not match ``^[a-zA-Z0-9_-]+$``;
- a text block is whitespace-only, or a final (prefill) assistant message ends
  in whitespace;
- a request carries ``tool_use`` / ``tool_result`` blocks but defines no tools;
- the first message is not a user message, a message is empty, a text block
  is empty, a role is unknown, ``model`` / ``max_tokens`` / ``messages`` are
  missing;
- extended thinking: with ``thinking`` enabled (not ``adaptive``, where the
  model may skip thinking on a turn), the assistant turn whose
  ``tool_use`` blocks the last user turn answers (the tool loop in progress)
  must start with a ``thinking`` / ``redacted_thinking`` block; with it
  disabled, a final (prefill) assistant message may hold no thinking; and a
  ``thinking`` block's ``signature`` must be one this server issued for that
  text (``tests.fakes.streams`` signs with the text's SHA-256), as the real
  API rejects a block that was altered or made up.

Consecutive messages of the same role are combined into one turn before the
pairing rules apply, as the API documents it does.

Mid-conversation ``system`` messages (a ``system`` role inside ``messages``,
taken from Claude Opus 4.8 on) are accepted right after a user message and
rejected anywhere else; a model named in ``no_mid_system`` (by prefix: the
older models) rejects them with "role 'system' is not supported on this
model", as those models do.

It accepts ``x-api-key`` or ``Authorization: Bearer`` (what SDK 2.x sends),
requires ``anthropic-version``, records every request, and can be told to
fail the next calls (429 / 500 / 529, with ``retry-after-ms`` so the SDK's own
retries are quick) or to answer after a delay.

For the proxy's tests it also speaks the rest of what a client uses:

- ``stream: true``: the exact event sequence of the API (``tests.fakes.streams``),
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

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.prompt_cache import PrefixCache, anthropic_blocks
from tests.fakes.streams import (
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

# The pattern the API requires of a tool_use id.
TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")

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


class InvalidRequest(Exception):
    pass


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _turns(messages: list[dict[str, Any]]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """Consecutive same-role messages as one turn, as the API combines them.

    Each turn is (index of its first message, role, blocks).
    """
    turns: list[tuple[int, str, list[dict[str, Any]]]] = []
    for i, message in enumerate(messages):
        if message["role"] == "system":
            continue  # an instruction between turns: no part of the pairing
        if turns and turns[-1][1] == message["role"]:
            turns[-1][2].extend(_blocks(message))
        else:
            turns.append((i, message["role"], list(_blocks(message))))
    return turns


# Model-name prefixes of the models older than Claude Opus 4.8: no system role
# inside ``messages``.
OLDER_MODELS = (
    "claude-3",
    "claude-opus-4-0",
    "claude-opus-4-1",
    "claude-opus-4-5",
    "claude-sonnet-4",
    "claude-haiku-4",
)


def _check_system_messages(body: dict[str, Any], no_mid_system: tuple[str, ...]) -> None:
    messages = body["messages"]
    for i, message in enumerate(messages):
        if message.get("role") != "system":
            continue
        if str(body.get("model", "")).startswith(no_mid_system):
            raise InvalidRequest(f"messages.{i}.role: role 'system' is not supported on this model")
        if i == 0 or messages[i - 1].get("role") != "user":
            raise InvalidRequest(
                f"messages.{i}: a system message must come right after a user message"
            )
        for j, block in enumerate(_blocks(message)):
            if block.get("type") != "text":
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: system messages may only hold text blocks"
                )


THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
THINKING_KINDS = ("thinking", "redacted_thinking")


def _check_thinking(body: dict[str, Any]) -> None:
    """The extended-thinking rules of the Messages API, with its wording."""
    messages = body["messages"]
    kind = (body.get("thinking") or {}).get("type")
    # ``adaptive`` lets the model skip thinking on a turn, so a tool loop's
    # turn need not start with it then; ``enabled`` always thinks first.
    enabled = kind in ("enabled", "adaptive")
    required = kind == "enabled"
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for j, block in enumerate(_blocks(message)):
            if block.get("type") != "thinking":
                continue
            text = str(block.get("thinking") or "")
            if block.get("signature") != hashlib.sha256(text.encode()).hexdigest():
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                )
    last = messages[-1]
    if not enabled:
        if last.get("role") == "assistant" and any(
            b.get("type") in THINKING_KINDS for b in _blocks(last)
        ):
            raise InvalidRequest(
                f"messages.{len(messages) - 1}.content.0: When thinking is disabled, an"
                " `assistant` message in the final position cannot contain `thinking`. To use"
                " thinking blocks, enable `thinking` in your request."
            )
        return
    turns = _turns(messages)
    if not required or len(turns) < 2 or turns[-1][1] != "user":
        return
    if not any(b.get("type") == "tool_result" for b in turns[-1][2]):
        return  # a new user turn: no tool loop in progress
    index, role, blocks = turns[-2]
    if role != "assistant" or not blocks:
        return
    first = blocks[0].get("type")
    if first not in THINKING_KINDS:
        raise InvalidRequest(
            f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`,"
            f" but found `{first}`. When `thinking` is enabled, a final `assistant` message"
            " must start with a thinking block (preceeding the lastmost set of `tool_use` and"
            " `tool_result` blocks). We recommend you include thinking blocks from previous"
            " turns. To avoid this requirement, disable `thinking`. Please consult our"
            f" documentation at {THINKING_DOCS}"
        )


def validate(body: dict[str, Any], no_mid_system: tuple[str, ...] = OLDER_MODELS) -> None:
    """Raise ``InvalidRequest`` with the real API's message for what it rejects."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidRequest("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")
    if messages[0].get("role") != "user":
        raise InvalidRequest('messages: first message must use the "user" role')
    _check_system_messages(body, no_mid_system)
    has_tools = bool(body.get("tools"))
    uses_tools = False
    use_ids: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise InvalidRequest(
                f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'"
            )
        blocks = _blocks(message)
        final_assistant = i == len(messages) - 1 and role == "assistant"
        if not blocks and not final_assistant:
            raise InvalidRequest(
                f"messages.{i}: all messages must have non-empty content except for the optional"
                " final assistant message"
            )
        for j, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "text" and not block.get("text"):
                raise InvalidRequest(
                    f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
                )
            if kind == "text" and not str(block["text"]).strip():
                raise InvalidRequest(
                    f"messages.{i}.content.{j}.text: text content blocks must contain"
                    " non-whitespace text"
                )
            if kind in ("tool_use", "tool_result"):
                uses_tools = True
            if kind == "tool_use" and role != "assistant":
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: tool_use blocks are only allowed in assistant"
                    " messages"
                )
            if kind == "tool_result" and role != "user":
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: tool_result blocks are only allowed in user"
                    " messages"
                )
            if kind == "tool_use":
                use_id = block.get("id")
                if not isinstance(use_id, str) or not TOOL_USE_ID.match(use_id):
                    raise InvalidRequest(
                        f"messages.{i}.content.{j}.id: String should match pattern"
                        " '^[a-zA-Z0-9_-]+$'"
                    )
                if use_id in use_ids:
                    raise InvalidRequest(
                        f"messages.{i}.content.{j}: `tool_use` ids must be unique: {use_id}"
                    )
                use_ids.add(use_id)
        if final_assistant and blocks:
            last = blocks[-1]
            if (
                last.get("type") == "text"
                and str(last.get("text", "")) != str(last.get("text", "")).rstrip()
            ):
                raise InvalidRequest(
                    "messages: final assistant content cannot end with trailing whitespace"
                )
    if uses_tools and not has_tools:
        raise InvalidRequest(
            "Requests which include `tool_use` or `tool_result` blocks must define tools."
        )
    # Pairing is checked on turns: the API documents that consecutive same-role
    # messages are combined into one turn.
    turns = _turns(messages)
    for t, (i, role, blocks) in enumerate(turns):
        if role == "assistant":
            ids = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            if not ids:
                continue
            nxt = turns[t + 1] if t + 1 < len(turns) else None
            answered = (
                {b.get("tool_use_id") for b in nxt[2] if b.get("type") == "tool_result"}
                if nxt is not None
                else set()
            )
            missing = [u for u in ids if u not in answered]
            if missing:
                raise InvalidRequest(
                    f"messages.{nxt[0] if nxt is not None else i}: `tool_use` ids were found"
                    " without `tool_result` blocks immediately after: "
                    f"{', '.join(missing)}. Each `tool_use` block must have a corresponding"
                    " `tool_result` block in the next message."
                )
            continue
        prev = turns[t - 1] if t > 0 else None
        ids_before = (
            {b.get("id") for b in prev[2] if b.get("type") == "tool_use"}
            if prev is not None
            else set()
        )
        answered_here: set[str] = set()
        seen_other = False
        for j, block in enumerate(blocks):
            if block.get("type") != "tool_result":
                seen_other = True
                continue
            use_id = block.get("tool_use_id")
            if use_id not in ids_before:
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result`"
                    f" blocks: {use_id}. Each `tool_result` block must have a"
                    " corresponding `tool_use` block in the previous message."
                )
            if use_id in answered_here:
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: each `tool_use` must have a single"
                    f" `tool_result`; found a second one for {use_id}"
                )
            if seen_other:
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: `tool_result` blocks must come first in a user"
                    " message, before any other content"
                )
            answered_here.add(use_id)
    _check_thinking(body)


def default_responder(body: dict[str, Any]) -> str:
    """A deterministic answer: <retain>/<summary> for an interrupt, plain text otherwise."""
    messages = body["messages"]
    texts = [b.get("text", "") for m in messages for b in _blocks(m) if b.get("type") == "text"]
    last = texts[-1] if texts else ""
    first_user = next(
        (
            b.get("text", "")
            for m in messages
            if m["role"] == "user"
            for b in _blocks(m)
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
    models: tuple[str, ...] = MODELS
    # Model-name prefixes that reject a system message inside ``messages``.
    no_mid_system: tuple[str, ...] = OLDER_MODELS
    _script: deque[ScriptedReply] = field(default_factory=deque)
    _cache: PrefixCache = field(default_factory=PrefixCache)
    # Answers as an agent when nothing is scripted (``tests.fakes.claude_code``):
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

    def messages_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.startswith("/v1/messages")]

    def start(self) -> FakeAnthropic:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

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
                    return send_stream(
                        self,
                        frames,
                        headers={"request-id": f"req_fake_{number}"},
                        delay=fake.stream_delay,
                        cut_after=fake.cut_stream_after,
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
