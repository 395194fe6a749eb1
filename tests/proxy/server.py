"""The proxy served as in production: gunicorn with the uvicorn worker on ``contextsvc.asgi``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.live_server import gunicorn


@contextmanager
def proxy_server(env: dict[str, str], log: Path, *args: str, timeout: float = 60) -> Iterator[int]:
    """A proxy process on a free loopback port (output in ``log``); yields the port once it accepts."""
    worker = ("-k", "uvicorn_worker.UvicornWorker", "-w", "1")
    with gunicorn(
        env, log, *worker, *args, timeout=timeout, app="contextsvc.asgi:application"
    ) as port:
        yield port
