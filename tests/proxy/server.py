"""The proxy served as in production: gunicorn with the uvicorn worker on ``contextsvc.asgi``."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.live_server import ROOT, free_port


@contextmanager
def proxy_server(env: dict[str, str], log: Path, *args: str, timeout: float = 60) -> Iterator[int]:
    """A proxy process on a free loopback port (output in ``log``); yields the port once it accepts."""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "contextsvc.asgi:application"]
    command += ["-k", "uvicorn_worker.UvicornWorker", "-w", "1", "-b", f"127.0.0.1:{port}", *args]
    with log.open("ab") as out:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert server.poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)
