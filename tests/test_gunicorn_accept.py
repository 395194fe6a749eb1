"""gunicorn.conf.py: a connection whose client has sent nothing yet holds no
worker thread (TCP_DEFER_ACCEPT), so clients slow to send their request — a
flood of reconnecting uploads from a busy machine — cannot keep the threads
from the other clients' requests."""

from __future__ import annotations

import http.client
import os
import socket
import time

import pytest

from tests.live_server import gunicorn

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "TCP_DEFER_ACCEPT"), reason="TCP_DEFER_ACCEPT is Linux's"
)


def get_openapi(port: int) -> float:
    """Seconds until a new connection's GET is answered."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/api/v1/openapi.json")
        response = conn.getresponse()
        assert response.status == 200 and b'"openapi"' in response.read()
    finally:
        conn.close()
    return time.perf_counter() - started


def test_silent_connections_hold_no_thread(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }
    # One worker with one thread: without the deferred accept, the silent
    # connection below takes that thread for gthread's 5 s wait for data.
    with gunicorn(env, tmp_path / "gunicorn.log", "-w", "1", "--threads", "1") as port:
        get_openapi(port)  # the worker is up
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        try:
            time.sleep(0.3)  # time enough for a worker to accept them
            assert get_openapi(port) < 2.0
        finally:
            for sock in silent:
                sock.close()
        # A client that sends its request after a pause is still served.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
            time.sleep(0.5)
            slow.sendall(b"GET /api/v1/openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert slow.recv(64).startswith(b"HTTP/1.1 200")
