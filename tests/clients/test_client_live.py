"""contextsvc_client against the live service (gunicorn; SQLite or PostgreSQL as the suite runs).

What the client promises: every operation of a session round trip, an
Idempotency-Key on every append so a retry after a lost answer stores once,
retries on 429/503 honouring Retry-After and on connection errors, and the
service's errors as typed exceptions with their code.
"""

from __future__ import annotations

import asyncio
import io
import time

import httpx
import pytest
from contextsvc_client import (
    AsyncClient,
    Client,
    ConflictError,
    ConnectionFailedError,
    NotFoundError,
    RetryPolicy,
    UnauthorizedError,
    ValidationError,
)

from tests.clients.conftest import LIVE_DB
from tests.conftest import tool_turn
from tests.live_server import free_port

pytestmark = [LIVE_DB]

FAST = RetryPolicy(max_retries=3, backoff=0.01, max_backoff=0.05)
WINDOW = {"context_window": 32_000, "max_output_tokens": 4_096, "buffer_tokens": 2_048}


class LoseFirstAnswer(httpx.HTTPTransport):
    """Sends each request to the server, then drops the first answer to a matching one."""

    def __init__(self, method: str, path_part: str) -> None:
        super().__init__()
        self.method, self.path_part = method, path_part
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == self.method and self.path_part in request.url.path:
            self.sent.append(request)
            if len(self.sent) == 1:
                response.read()
                raise httpx.ReadError("connection reset after the server answered", request=request)
        return response


class RefuseFirst(httpx.HTTPTransport):
    """Answers the first request itself with ``status`` (+ Retry-After), then forwards."""

    def __init__(self, status: int, retry_after: str | None) -> None:
        super().__init__()
        self.status, self.retry_after = status, retry_after
        self.calls = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls == 1:
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            code = "RATE_LIMITED" if self.status == 429 else "SERVICE_UNAVAILABLE"
            body = {"error": {"code": code, "message": "later", "details": None}}
            return httpx.Response(self.status, json=body, headers=headers)
        return super().handle_request(request)


def test_a_session_round_trip_through_every_operation(live_service):
    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("claude-sonnet-4-5", agent="client-test", **WINDOW)
        assert session.data["context_window"] == 32_000
        session.set_system([{"name": "base", "content": "You are terse."}])
        tool = {"name": "bash", "description": "Run a command", "input_schema": {"type": "object"}}
        assert session.set_tools([tool])["tools"] == ["bash"]

        first = session.append([{"role": "user", "content": "list the files"}])
        appended = session.append(tool_turn("call_1", "a.py\nb.py\n"))
        assert [m["seq"] for m in first["messages"] + appended["messages"]] == [1, 2, 3]

        body = session.context("anthropic")
        assert body["messages"][0]["content"][0]["text"] == "list the files" or (
            body["messages"][0]["content"] == "list the files"
        )
        assert session.context("openai")["messages"][0]["role"] == "system"
        responses = session.context("responses")
        assert "You are terse." in responses["instructions"]
        assert any(i.get("type") == "function_call_output" for i in responses["input"])
        raw = session.context("raw")
        assert [m["seq"] for m in raw["messages"]] == [1, 2, 3]

        report = session.usage(900, 40, cache_read_tokens=100)
        assert report["total_tokens"] == 1040
        assert session.budget()["usage_reports"]

        run = session.compact(strategy="drop_oldest_turns", retain_last_turns=1, wait=True)
        assert run["status"] == "succeeded"
        assert session.snapshot()["last_seq"] == 3

        upload = session.upload_output(
            "\n".join(f"line {i}" for i in range(1, 501)), tool_name="cat"
        )
        ref = upload["ref"] if "ref" in upload else upload["id"]
        page = session.read_ref(ref, offset=10, limit=3)
        assert page["text"].splitlines()[0].endswith("line 10") and page["has_more"]
        found = session.grep_ref(ref, r"line 25\d$", context=1)
        assert [m["line"] for m in found["matches"]] == list(range(250, 260))

        again = client.get_session(session.id)
        assert again.data["id"] == session.id
        listed = client.list_sessions(agent="client-test")
        assert session.id in [s["id"] for s in listed["items"]]


def test_upload_output_streams_a_file_or_chunks(live_service):
    lines = [f"{i:07d} {'x' * 60}\n".encode() for i in range(1, 50_001)]  # ~3.4 MB
    whole = b"".join(lines)
    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("claude-sonnet-4-5", **WINDOW)
        from_file = session.upload_output(io.BytesIO(whole), tool_name="build")
        chunks = (b"".join(lines[i : i + 1000]) for i in range(0, len(lines), 1000))
        from_chunks = session.upload_output(chunks, tool_name="build")  # chunked, no length
        assert from_file["line_count"] == 50_000 and from_file["byte_size"] == len(whole)
        # The same bytes: stored once, whichever way they came.
        assert from_chunks["deduplicated"] and from_chunks["ref"] == from_file["ref"]
        last = session.read_ref(from_file["ref"], offset=50_000, limit=1)
        assert "0050000" in last["text"] and not last["has_more"]


def test_retract_takes_the_last_messages_out_of_the_window(live_service):
    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("claude-sonnet-4-5", **WINDOW)
        session.append(
            [
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "two"},
                {"role": "user", "content": "three"},
            ]
        )
        out = session.retract(last=1)
        assert [m["seq"] for m in out["retracted"]] == [3]
        assert [m["content"] for m in session.context("raw")["messages"]] == ["one", "two"]
        with pytest.raises(ValidationError) as bad:
            session.retract(from_seq=99)
        assert bad.value.field == "from_seq"
        with pytest.raises(ValueError):
            session.retract()


def test_delete_session_then_it_is_not_found(live_service):
    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("claude-sonnet-4-5", **WINDOW)
        session.append([{"role": "user", "content": "hello"}])
        session.delete()
        with pytest.raises(NotFoundError) as gone:
            client.get_session(session.id)
        assert gone.value.code == "NOT_FOUND" and gone.value.status == 404


def test_an_append_whose_answer_is_lost_is_retried_and_stored_once(live_service):
    transport = LoseFirstAnswer("POST", "/messages")
    with Client(live_service.url, live_service.key, retry=FAST, transport=transport) as client:
        session = client.create_session("claude-sonnet-4-5", **WINDOW)
        out = session.append([{"role": "user", "content": "only once"}])
    # The request reached the server twice, with one key; the batch is stored once.
    keys = {r.headers["Idempotency-Key"] for r in transport.sent}
    assert len(transport.sent) == 2 and len(keys) == 1
    assert [m["seq"] for m in out["messages"]] == [1]
    with Client(live_service.url, live_service.key) as client:
        raw = client.session(session.id).context("raw")
    assert [m["content"] for m in raw["messages"]] == ["only once"]


def test_every_append_gets_its_own_idempotency_key(live_service):
    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("claude-sonnet-4-5", **WINDOW)
        # The same message twice on purpose: two calls, two keys, two messages.
        session.append([{"role": "user", "content": "again"}])
        session.append([{"role": "user", "content": "again"}])
        assert len(session.context("raw")["messages"]) == 2
        session.append([{"role": "user", "content": "x"}], idempotency_key="mine-1")
        replay = session.append([{"role": "user", "content": "x"}], idempotency_key="mine-1")
        assert [m["seq"] for m in replay["messages"]] == [3]
        with pytest.raises(ConflictError) as conflict:
            session.append([{"role": "user", "content": "y"}], idempotency_key="mine-1")
        assert conflict.value.code == "CONFLICT"


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_are_retried_after_retry_after(live_service, status):
    transport = RefuseFirst(status, retry_after="1")
    policy = RetryPolicy(max_retries=2, backoff=0.01)
    with Client(live_service.url, live_service.key, retry=policy, transport=transport) as client:
        started = time.monotonic()
        session = client.create_session("claude-sonnet-4-5", id=f"retry-{status}", **WINDOW)
        waited = time.monotonic() - started
    assert session.id == f"retry-{status}" and transport.calls == 2
    assert waited >= 1.0  # Retry-After: 1 was honoured, not the 10 ms backoff


def test_connection_errors_are_retried_then_raised():
    attempts = []

    class Counting(httpx.HTTPTransport):
        def handle_request(self, request):
            attempts.append(request)
            return super().handle_request(request)

    dead = f"http://127.0.0.1:{free_port()}"
    with Client(dead, "cx_nobody", retry=FAST, transport=Counting()) as client:
        with pytest.raises(ConnectionFailedError) as failed:
            client.session("s").append([{"role": "user", "content": "hi"}])
    assert len(attempts) == 4  # the first try and FAST's three retries
    assert len({r.headers["Idempotency-Key"] for r in attempts}) == 1
    assert failed.value.code == "CONNECTION_ERROR"


def test_errors_are_typed_and_carry_the_service_code(live_service):
    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("claude-sonnet-4-5", **WINDOW)
        with pytest.raises(ValidationError) as invalid:
            session.append([{"role": "tool", "content": "orphan"}])
        assert invalid.value.code == "VALIDATION_ERROR" and invalid.value.status == 422
        assert "tool_call_id" in invalid.value.message
        assert invalid.value.field and invalid.value.field.startswith("messages")
        with pytest.raises(NotFoundError):
            client.session("no-such-session").context()
    with Client(live_service.url, "cx_wrong") as stranger:
        with pytest.raises(UnauthorizedError) as denied:
            stranger.list_sessions()
        assert denied.value.code == "UNAUTHORIZED"


def test_the_async_client_does_the_same_round_trip(live_service):
    async def run() -> tuple[list[int], dict, int]:
        async with AsyncClient(live_service.url, live_service.key) as client:
            session = await client.create_session("gpt-4o", provider="openai", **WINDOW)
            out = await session.append(
                [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
            )
            body = await session.context("openai")
            await session.usage(50, 5)
            await session.retract(last=1)
            live = await session.context("raw")
            try:
                await client.get_session("missing-one")
            except NotFoundError as exc:
                assert exc.status == 404
            return [m["seq"] for m in out["messages"]], body, len(live["messages"])

    seqs, body, live_count = asyncio.run(run())
    assert seqs == [1, 2]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    assert live_count == 1


def test_context_purpose_decides_what_is_a_priced_call(live_service):
    """docs/api.md#context-purpose: a look is free, a build a model takes is a call."""

    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("claude-sonnet-4-5", agent="client-purpose", **WINDOW)
        session.append([{"role": "user", "content": "list the files"}])
        session.context("raw")
        session.context("anthropic", purpose="read")
        assert session.calls()["items"] == []
        session.context("anthropic", purpose="call")
        [call] = session.calls()["items"]
        assert call["cost_basis"] == "estimated" and call["cost_usd"] > 0
        # One record, with what it sent message by message (a REST build: no client side).
        one = session.call(call["id"])
        assert one["id"] == call["id"] and one["account"]["client"] is None
        assert one["account"]["messages"] == [{"from": 1, "to": 1, "as": "kept", "count": 1}]
        with pytest.raises(NotFoundError):
            session.call(call["id"] + 1000)
