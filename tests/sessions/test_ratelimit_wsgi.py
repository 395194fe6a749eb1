"""A flooding key is refused in front of Django (contextsvc/ratelimit/wsgi.py):
the same 429 + Retry-After error body, no query, the body never read; other
keys and bad keys go through to Django as before."""

from __future__ import annotations

import io
import json
import os
import socket
import time
import uuid

import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections

from contextsvc.ratelimit import KeyLimiter, RateLimited
from contextsvc.ratelimit.limiter import HEAVY_REFUSAL_MEMORY_SECONDS
from contextsvc.ratelimit.wsgi import DRAIN_BYTES, unread_body_ends_connection
from contextsvc.wsgi import application

REDIS_URL = os.environ.get("REDIS_URL")
BIG = 30_000_000


class Unreadable(io.RawIOBase):
    """A request body that fails the test if anyone reads it."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        raise AssertionError("the refused request's body was read")


def call(raw_key: str | None, path: str, size: int = 0, method: str = "POST", **headers: str):
    """``application`` called as gunicorn calls it; (status, headers, body)."""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "wsgi.url_scheme": "http",
        "wsgi.input": Unreadable() if size else io.BytesIO(b""),
        "wsgi.errors": io.StringIO(),
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(size),
        **{f"HTTP_{name.upper()}": value for name, value in headers.items()},
    }
    if raw_key:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {raw_key}"
    answer: dict = {}

    def start_response(status: str, response_headers: list, exc_info=None) -> None:
        answer.update(status=int(status.split()[0]), headers=dict(response_headers))

    # As Django's test client does: the request cycle must not close the test's
    # database connection (its transaction is the test's isolation).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        chunks = application(environ, start_response)
        try:
            body = b"".join(chunks)
        finally:
            getattr(chunks, "close", lambda: None)()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    return answer["status"], answer["headers"], body


def flood_until_refused(client, sid: str) -> None:
    for _ in range(2):
        assert client.get(f"sessions/{sid}/budget").status_code == 200
    assert client.get(f"sessions/{sid}/budget").status_code == 429


def test_a_flooding_key_is_refused_before_django_with_the_error_body(
    alice, alice_key, bob, bob_key, make_session, settings, django_assert_num_queries
):
    sid = make_session()["id"]
    bob_sid = make_session(bob)["id"]
    settings.CONTEXTSVC_RATE_LIMIT = "2/minute"
    flood_until_refused(alice, sid)
    path = f"/api/v1/sessions/{sid}/messages"
    started = []
    request_started.connect(on_start := lambda **kw: started.append(kw))
    try:
        with django_assert_num_queries(0):
            # A 30 MB upload: answered from its headers, its body never read.
            status, headers, body = call(alice_key[1], path, BIG, x_request_id="trace-1")
    finally:
        request_started.disconnect(on_start)
    assert not started  # Django never saw it
    assert status == 429
    error = json.loads(body)["error"]
    retry_after = int(headers["Retry-After"])
    assert 1 <= retry_after <= 60
    assert error["code"] == "RATE_LIMITED"
    assert f"retry in {retry_after} s" in error["message"]
    assert error["details"] == {
        "limit": "2 per 1 minute",
        "scope": "rate",
        "retry_after": retry_after,
    }
    assert headers["Content-Type"] == "application/json"
    assert headers["Content-Length"] == str(len(body))
    assert headers["X-Request-Id"] == "trace-1"
    # Another key, a bad key and a path outside the API go through to Django.
    assert call(bob_key[1], f"/api/v1/sessions/{bob_sid}/budget", method="GET")[0] == 200
    assert bob.get(f"sessions/{bob_sid}/budget").status_code == 200
    assert call(alice_key[1], "/dashboard/")[0] != 429


def test_a_bad_key_is_never_refused_in_front_of_django(anon, alice, make_session, settings):
    sid = make_session()["id"]
    settings.CONTEXTSVC_RATE_LIMIT = "2/minute"
    flood_until_refused(alice, sid)
    path = f"/api/v1/sessions/{sid}/budget"
    status, _, body = call("not-a-key", path, method="GET")
    assert status == 401 and json.loads(body)["error"]["code"] == "UNAUTHORIZED"
    assert call(None, path, method="GET")[0] == 401
    assert call(alice.raw_key, path, method="GET")[0] == 429  # the flooding key is


class ServerBody:
    failed = False  # gunicorn's body reader: True closes the connection undrained


@pytest.mark.parametrize(
    ("size", "closes"), [(BIG, True), (DRAIN_BYTES + 1, True), (DRAIN_BYTES, False), (0, False)]
)
def test_an_unread_upload_closes_its_connection_instead_of_being_drained(size, closes):
    body = ServerBody()
    unread_body_ends_connection({"wsgi.input": body, "CONTENT_LENGTH": str(size)})
    assert body.failed is closes
    # Another server's input, or a bad length: nothing happens, nothing raises.
    unread_body_ends_connection({"wsgi.input": io.BytesIO(), "CONTENT_LENGTH": str(size)})
    unread_body_ends_connection({"wsgi.input": ServerBody(), "CONTENT_LENGTH": "x"})


def test_an_unread_upload_s_socket_reads_end_without_waiting_for_the_client():
    # gunicorn's closing drain reads the socket until it is empty-and-closed:
    # with the read side shut, a read returns what was buffered, then b"" at
    # once instead of waiting for a client that sends nothing more.
    server, client = socket.socketpair()
    with server, client:
        client.sendall(b"x" * 1000)
        unread_body_ends_connection(
            {"wsgi.input": ServerBody(), "CONTENT_LENGTH": str(BIG), "gunicorn.socket": server}
        )
        server.settimeout(5)
        started = time.monotonic()
        drained = b""
        while chunk := server.recv(4096):
            drained += chunk
        assert len(drained) <= 1000 and time.monotonic() - started < 1
        server.sendall(b"HTTP/1.1 429 Too Many Requests\r\n\r\n")  # the answer still goes out
        assert client.recv(100).startswith(b"HTTP/1.1 429")
    # A client gone already: nothing raises.
    unread_body_ends_connection(
        {"wsgi.input": ServerBody(), "CONTENT_LENGTH": str(BIG), "gunicorn.socket": server}
    )


def test_every_thread_share_taken_is_refused_before_any_lookup():
    limiter = KeyLimiter("memory://", "off", max_concurrent=0, lease_seconds=60, web_threads=2)
    key, other = uuid.uuid4().hex, uuid.uuid4().hex
    limiter.admit(other).release()  # served here just now: its connection is open
    held = limiter.admit(key)  # one of this worker's two threads
    with pytest.raises(RateLimited) as refused:
        limiter.refuse_known(key)
    assert refused.value.details["scope"] == "concurrency"
    assert refused.value.retry_after == 1
    limiter.refuse_known(other)  # other keys are not refused
    held.release()
    limiter.refuse_known(key)


@pytest.mark.needs_redis
def test_a_big_body_while_another_worker_serves_the_key_s_big_one_is_refused_unread():
    def worker() -> KeyLimiter:
        return KeyLimiter(REDIS_URL, "off", max_concurrent=0, lease_seconds=60, max_heavy=1)

    here, there, key = worker(), worker(), uuid.uuid4().hex
    held = there.admit(key, 30, heavy=True)
    here.refuse_known(key, 30, heavy=True)  # this worker does not know yet
    with pytest.raises(RateLimited):
        here.admit(key, 30, heavy=True)  # learnt from the shared lease
    with pytest.raises(RateLimited) as refused:
        here.refuse_known(key, 30, heavy=True)  # now refused before any round trip
    assert refused.value.details["limit"] == "1 concurrent requests with a large body"
    here.refuse_known(key)  # the key's small calls go on
    held.release()
    time.sleep(HEAVY_REFUSAL_MEMORY_SECONDS + 0.05)
    here.refuse_known(key, 30, heavy=True)  # asked again after a moment
    here.admit(key, 30, heavy=True).release()
