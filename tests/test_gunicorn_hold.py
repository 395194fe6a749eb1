"""The project's gunicorn worker (contextsvc/gunicorn_worker.py) leaves a
refused connection unread for its Retry-After: the 429 goes out at once, the
next request on that connection waits, and no thread waits with it."""

from __future__ import annotations

import os
import re
import socket
import time
from contextlib import ExitStack

import pytest
from django.db import connection

from sessions.services.keys import agent_key_create
from sessions.services.sessions import session_create
from tests.live_server import database_url, gunicorn

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _needs_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("a server sharing the test database needs PostgreSQL (DATABASE_URL)")


def serve(tmp_path, **settings: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXTSVC_")}
    env.update(
        DATABASE_URL=database_url(),
        DEBUG="false",
        LOG_LEVEL="WARNING",
        CONTEXTSVC_RATE_LIMIT="2/minute",
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


def answer(sock: socket.socket) -> tuple[int, float]:
    """One whole response's status and the seconds it took to arrive."""
    started, data = time.monotonic(), b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1]), time.monotonic() - started


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
        # 2 a minute).
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


def test_no_hold_when_it_is_off(tmp_path):
    flood, _ = keys_and_sessions()
    budget = "/api/v1/sessions/f1/budget"
    with serve(tmp_path, CONTEXTSVC_REFUSAL_HOLD_SECONDS="0") as port:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            statuses = []
            for _ in range(5):
                sock.sendall(request(flood, budget))
                statuses.append(answer(sock))
    assert [s for s, _ in statuses] == [200, 200, 429, 429, 429]
    assert all(took < 0.5 for _, took in statuses[2:])  # the 429s: none held


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
