"""Holding a refused flood's connection: what the WSGI layer asks of the server.

A flooding client that ignores ``Retry-After`` sends its next request the
moment a 429 arrives: thousands a second, each parsed by the server in Python
before it can be refused. The server worker (``contextsvc/gunicorn_worker.py``)
can instead leave a refused connection alone until its ``Retry-After`` has
passed: the 429 is sent at once, but the next request on that connection is
not read until then (no thread waits for it), and a refused upload's
connection is closed only then. A client that waits as told sees no
difference; one that does not waits anyway.

``hold`` is a no-op outside that worker (runserver, other servers, tests that
call the application directly).
"""

from __future__ import annotations

import threading
import time

_current = threading.local()


def serving(conn: object | None) -> None:
    """Called by the server worker around each request: the connection this
    thread serves (None when it is done)."""
    _current.conn = conn


def hold(seconds: float) -> None:
    """Have the server leave the current request's connection unread for
    ``seconds`` after the response (then go on as it would have)."""
    conn = getattr(_current, "conn", None)
    if conn is not None and seconds > 0:
        conn.contextsvc_hold_until = time.monotonic() + seconds
