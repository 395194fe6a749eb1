"""A real gunicorn serving the project, for tests that need a live server, and
the URL of the suite's own (PostgreSQL) test database for it to share."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url(application_name: str | None = None) -> str:
    """The test database as a DATABASE_URL; ``application_name`` tags the server's
    connections (``pg_stat_activity``)."""
    s = connection.settings_dict
    user = quote(s.get("USER") or "", safe="")
    password = quote(s.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    url = f"postgres://{auth}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"
    return f"{url}?application_name={application_name}" if application_name else url


@contextmanager
def gunicorn(
    env: dict[str, str],
    log: Path,
    *args: str,
    timeout: float = 60,
    app: str = "contextsvc.wsgi:application",
) -> Iterator[int]:
    """The project's gunicorn (its gunicorn.conf.py; ``args`` are extra flags) on a
    free loopback port, its output in ``log``: yields the port once it accepts.

    A file, not a pipe: a pipe nobody reads fills up and blocks the server's logging.
    """
    port = free_port()
    with log.open("ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", app] + ["-b", f"127.0.0.1:{port}", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert server.poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, f"gunicorn ({app}) did not start"
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)
