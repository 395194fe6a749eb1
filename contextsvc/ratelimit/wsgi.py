"""Refuses a flooding agent key in front of Django, before its body is read.

What the limiter of this process already knows it would refuse (a rate just
refused, a big body while the key's big one is in flight, every thread share
of this worker taken: ``KeyLimiter.refuse_known``) is answered here, from the
``Authorization`` header and ``Content-Length`` alone: no Django request, no
URL resolving, no database, and the body is never read. A refused request then
costs ~12 µs of the worker's CPU instead of ~190 µs inside Django, and a flood
of them takes little of the GIL that the other keys' requests in the same
worker need.

After the answer gunicorn would drain up to 64 KB of an unread body, waiting
up to 5 s for a client that sends it slowly: a thread held for the flooding
key, outside its share. So a refused upload's connection is closed, not
drained (``unread_body_ends_connection``; after its hold, ``hold_refused``, on
the project's gunicorn worker): the thread is free once the answer is out
(a WSGI application may not send ``Connection: close`` itself: PEP 3333), and
the read side is shut so that gunicorn's closing drain on its poller thread
never waits for the client either.

Only an admitted key is ever remembered by the limiter, so a bad key passes
through to Django and stays a 401.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from django.conf import settings

from contextsvc.middleware import REQUEST_ID_HEADER, sane_request_id

from . import get_limiter, hold_refused
from .rates import RateLimited

# What gunicorn drains of an unread body before it reuses a connection: a body
# this small (sent with its headers) is drained at once.
DRAIN_BYTES = 64 * 1024

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class RefuseFloodingKeys:
    """WSGI middleware around the Django application (``contextsvc.wsgi``).

    ``identify`` turns a bearer token into the limiter's identity for its key
    (the same one the auth layer admits it under).
    """

    def __init__(self, app: WSGIApp, identify: Callable[[str], str], prefix: str = "/api/") -> None:
        self.app, self.identify, self.prefix = app, identify, prefix

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        refusal = self.refusal(environ)
        if refusal is None:
            return self.app(environ, start_response)
        body = orjson.dumps(refusal.body())
        rid = sane_request_id(environ.get("HTTP_X_REQUEST_ID", ""))
        start_response(
            "429 Too Many Requests",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Retry-After", str(refusal.retry_after)),
                (REQUEST_ID_HEADER, rid),
                ("X-Content-Type-Options", "nosniff"),
            ],
        )
        unread_body_ends_connection(environ)
        hold_refused(refusal)
        return [body]

    def refusal(self, environ: dict[str, Any]) -> RateLimited | None:
        """The 429 this request gets before Django, or None to let it in."""
        if not environ.get("PATH_INFO", "").startswith(self.prefix):
            return None
        # Split as django-ninja's HttpBearer does, so the token is the same one.
        scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        limiter = get_limiter()
        if limiter is None:
            return None
        size = content_length(environ)
        heavy = size >= settings.CONTEXTSVC_HEAVY_BODY_BYTES
        try:
            limiter.refuse_known(self.identify(token), size // 1_000_000, heavy=heavy)
        except RateLimited as exc:
            return exc
        return None


def unread_body_ends_connection(environ: dict[str, Any]) -> None:
    """For a request answered without reading its body of more than
    ``DRAIN_BYTES``: have the server close its connection at once instead of
    draining the body first.

    gunicorn closes a connection whose body it cannot account for (its body
    reader's ``failed`` flag, set when reading raised) without draining it;
    a body left unread on purpose is the same case. Elsewhere nothing happens.
    """
    body = environ.get("wsgi.input")
    if content_length(environ) > DRAIN_BYTES and hasattr(body, "failed"):
        body.failed = True
        # gunicorn (gthread) still closes "gracefully" on its poller thread:
        # up to 64 KB read in 4 KB steps, waiting up to 2 s for a client that
        # sends slowly — or, flooding from a loaded machine, is simply not
        # running — while no other connection of that worker is dispatched
        # (the calm keys' requests). With the read side shut, those reads take
        # what is already buffered and end at once; the answer still goes out.
        sock = environ.get("gunicorn.socket")
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass  # the client is gone already


def content_length(environ: dict[str, Any]) -> int:
    """The request's declared body size (0 when absent or not a number)."""
    try:
        return max(0, int(environ.get("CONTENT_LENGTH") or 0))
    except ValueError:
        return 0
