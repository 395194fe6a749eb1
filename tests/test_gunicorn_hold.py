"""A refused request through the project's gunicorn: the 429 goes out at once
from the headers alone, and the worker (contextsvc/gunicorn_worker.py) leaves
the connection unread for its Retry-After — the next request on it waits, and
no thread waits with it."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from contextlib import ExitStack

import pytest

from sessions.services.keys import agent_key_create
from sessions.services.sessions import session_create
from tests.live_server import database_url, gunicorn

pytestmark = [pytest.mark.needs_postgres, pytest.mark.django_db(transaction=True)]


def serve(tmp_path, **settings: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXTSVC_")}
    env.update(
        DATABASE_URL=database_url(),
        DEBUG="false",
        LOG_LEVEL="WARNING",
        # A day: a sliding window's count decays as its period turns, and a
        # minute's could turn during a test and let a refused key in again.
        CONTEXTSVC_RATE_LIMIT="2/day",
        CONTEXTSVC_RATE_LIMIT_STORAGE="memory://",
        CONTEXTSVC_PLAIN_HTTP="true",
        **settings,
    )
    # One worker with two threads: a hold that took a thread would show at once.
    return gunicorn(env, tmp_path / "gunicorn.log", "-w", "1", "--threads", "2")


def request(raw_key: str, path: str, method: str = "GET", length: int | None = None) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {raw_key}\r\n"
    if length is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
    return (head + "\r\n").encode()


def response(sock: socket.socket) -> bytes:
    """One whole response: its headers and its Content-Length of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def answer(sock: socket.socket) -> tuple[int, float]:
    """One whole response's status and the seconds it took to arrive."""
    started = time.monotonic()
    status = int(response(sock).split()[1])
    return status, time.monotonic() - started


def keys_and_sessions():
    flood, flood_raw = agent_key_create(name="flood")
    calm, calm_raw = agent_key_create(name="calm")
    session_create(owner=flood, data={"model": "claude-sonnet-4-5", "id": "f1"})
    session_create(owner=calm, data={"model": "claude-sonnet-4-5", "id": "c1"})
    return flood_raw, calm_raw


def test_a_refused_connection_waits_its_retry_after_holding_no_thread(tmp_path):
    flood, calm = keys_and_sessions()
    budget = "/api/v1/sessions/f1/budget"
    with serve(tmp_path) as port, ExitStack() as stack:
        socks = [
            stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=20))
            for _ in range(4)
        ]
        statuses = []
        for _ in range(3):
            socks[0].sendall(request(flood, budget))
            statuses.append(answer(socks[0]))
        assert [s for s, _ in statuses] == [200, 200, 429]  # refused in Django
        # Four connections of the refused key, each answered 429 at once
        # (refused in front of Django now) and then held: more than the
        # worker's two threads.
        held_since = time.monotonic()
        for sock in socks[1:]:
            sock.sendall(request(flood, budget))
            status, took = answer(sock)
            assert status == 429 and took < 0.5
        # The next request on a held connection is read only when the hold ends...
        socks[0].sendall(request(flood, budget))
        # ...while the other key is served at once, on two threads (its own
        # 2 a day).
        with socket.create_connection(("127.0.0.1", port), timeout=20) as other:
            for _ in range(2):
                other.sendall(request(calm, "/api/v1/sessions/c1/budget"))
                status, took = answer(other)
                assert status == 200 and took < 0.5
        status, took = answer(socks[0])
        assert status == 429  # refused again, on the same kept-alive connection
        assert time.monotonic() - held_since >= 0.9, "the next request was not held"
        assert took < 2.5


def test_a_refused_upload_is_closed_when_its_hold_ends(tmp_path):
    flood, _ = keys_and_sessions()
    messages = "/api/v1/sessions/f1/messages"
    with serve(tmp_path) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            for _ in range(3):
                sock.sendall(request(flood, "/api/v1/sessions/f1/budget"))
                answer(sock)
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(request(flood, messages, "POST", 30_000_000))  # no body at all
            status, took = answer(sock)
            assert status == 429 and took < 0.5
            started = time.monotonic()
            assert sock.recv(65536) == b""  # closed, not drained: nobody read the body
            assert 0.5 < time.monotonic() - started < 2.5


def test_a_stopping_worker_answers_its_held_connections_and_exits(tmp_path):
    flood, _ = keys_and_sessions()
    budget = "/api/v1/sessions/f1/budget"
    with socket.socket() as sock:
        with serve(tmp_path, CONTEXTSVC_REFUSAL_HOLD_SECONDS="30") as port:
            sock.settimeout(20)
            sock.connect(("127.0.0.1", port))
            for _ in range(3):
                sock.sendall(request(flood, budget))
                answer(sock)
            sock.sendall(request(flood, budget))  # waits behind a 30 s hold
            time.sleep(0.2)
            started = time.monotonic()
        # gunicorn stopped (SIGTERM, as at a deploy) without waiting the hold
        # out, and the waiting request was answered, not dropped.
        assert time.monotonic() - started < 10
        assert answer(sock)[0] == 429


def test_gunicorn_answers_a_refused_upload_without_waiting_for_its_body(tmp_path):
    """Only the headers of a 30 MB upload are sent: the 429 arrives anyway, and
    with the hold off the connection is closed at once, not drained."""
    flood, _ = keys_and_sessions()
    messages = "/api/v1/sessions/f1/messages"
    with serve(tmp_path, CONTEXTSVC_REFUSAL_HOLD_SECONDS="0") as port:
        # One keep-alive connection: each request's slot is given back before
        # the next is read, so only the rate refuses, from the third on.
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            statuses = []
            for _ in range(5):
                sock.sendall(request(flood, messages, "POST", 2) + b"{}")
                statuses.append(answer(sock))
        # An empty body is a 422, counted all the same.
        assert [s for s, _ in statuses] == [422, 422, 429, 429, 429], statuses
        assert all(took < 0.5 for _, took in statuses[2:])  # no hold: read at once
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(request(flood, messages, "POST", 30_000_000))  # no body at all
            started = time.monotonic()
            refused = response(sock)
            waited = time.monotonic() - started
            closed = sock.recv(65536) == b""
            took = time.monotonic() - started
    status_line, _, rest = refused.partition(b"\r\n")
    assert status_line.split()[1] == b"429", refused[:300]
    assert b"retry-after:" in rest.lower()
    error = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "RATE_LIMITED" and error["details"]["scope"] == "rate"
    assert waited < 5  # not the server's read timeout: nothing waited for the body
    # gunicorn would wait 5 s to drain 64 KB, then 2 s in its closing drain.
    assert closed and took < 1, took
