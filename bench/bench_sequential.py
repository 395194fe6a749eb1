"""A client that never has two requests in flight, under its key's rates, is
never refused. Prints the 429 counts; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc REDIS_URL=redis://... \\
        python bench/bench_sequential.py

A real gunicorn with the shipped settings (gunicorn.conf.py: workers, threads,
keep-alive, the holding worker class) and the shipped limits, the key's rates
out of the client's reach. One client sends BENCH_SEQUENTIAL (10,000) GETs
one after another over a new connection each, then as many over one kept-alive
connection, while another key calls the server every 20 requests over several
kept-alive connections (so that a thread is kept free for it on the workers).
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter

from common import django_on_scratch_database, gunicorn

N = int(os.environ.get("BENCH_SEQUENTIAL", "10000"))


def call(sock: socket.socket, raw: str, path: str) -> int:
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {raw}\r\n\r\n".encode()
    )
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1])


def main() -> None:
    db_url = django_on_scratch_database("_sequential")
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    key, raw = agent_key_create(name="sequential")
    other, other_raw = agent_key_create(name="other")
    session_create(owner=key, data={"model": "claude-sonnet-4-5", "id": "s1"})
    session_create(owner=other, data={"model": "claude-sonnet-4-5", "id": "o1"})
    # The shipped gunicorn settings and limits; only the key's rates are put out
    # of this client's reach, as the rule is about refusals it did not earn.
    limits = {
        "CONTEXTSVC_PLAIN_HTTP": "true",
        "CONTEXTSVC_RATE_LIMIT": "100000000/minute",
        "CONTEXTSVC_RATE_PACE": "1000000/second",
    }
    with gunicorn(db_url, workers=None, limits=limits) as (port, _server):
        others: list[socket.socket] = []
        counts = {}
        for mode in ("new connections", "keep-alive"):
            statuses: Counter[int] = Counter()
            kept = socket.create_connection(("127.0.0.1", port), timeout=30)
            started = time.monotonic()
            for n in range(N):
                if n % 20 == 0:
                    # The other key: a call on each of its connections (8, spread
                    # over the workers as gunicorn accepts them), renewed when closed.
                    for i in range(8):
                        for _ in range(2):
                            if len(others) <= i:
                                others.append(socket.create_connection(("127.0.0.1", port)))
                            try:
                                call(others[i], other_raw, "/api/v1/sessions/o1/budget")
                                break
                            except ConnectionError:
                                others[i].close()
                                others[i] = socket.create_connection(("127.0.0.1", port))
                if mode == "new connections":
                    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                        statuses[call(sock, raw, "/api/v1/sessions/s1/budget")] += 1
                else:
                    statuses[call(kept, raw, "/api/v1/sessions/s1/budget")] += 1
            kept.close()
            counts[mode] = statuses
            print(
                f"{mode}: {N:,} sequential requests in {time.monotonic() - started:.0f} s, "
                f"429: {statuses[429]}, statuses {dict(statuses)}",
                flush=True,
            )
        for sock in others:
            sock.close()


if __name__ == "__main__":
    main()
