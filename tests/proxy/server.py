"""The proxy served as in production: gunicorn with the uvicorn worker on ``contextsvc.asgi``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from tests.live_server import database_url, gunicorn


@contextmanager
def proxy_server(env: dict[str, str], log: Path, *args: str, timeout: float = 60) -> Iterator[int]:
    """A proxy process on a free loopback port (output in ``log``); yields the port once it accepts."""
    worker = ("-k", "uvicorn_worker.UvicornWorker", "-w", "1")
    with gunicorn(
        env, log, *worker, *args, timeout=timeout, app="contextsvc.asgi:application"
    ) as port:
        yield port


def live_proxy(tmp_path: Path, **settings: str) -> AbstractContextManager[int]:
    """``proxy_server`` on the test database, quiet, with ``settings`` (the fakes' upstream
    URLs, a managed key) over this process's environment; the log in ``tmp_path``."""
    env = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "false", "LOG_LEVEL": "WARNING"}
    return proxy_server({**env, **settings}, tmp_path / "proxy.log")
