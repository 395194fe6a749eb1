"""An agent that floods the API, run as its own process (``python flood_agent.py``).

The flooding agent of a real deployment runs on its own machine: its CPU is
not the server's. On a small test box it shares the cores, so the starvation
test starts it at the lowest CPU priority (nice 19) — what it measures is then
what the *server* lets one key take from another, not the client's own load.

    flood_agent.py PORT KEY BIG_SID[,…] SMALL_SID[,…] BIG_BYTES

Floods until a line arrives on stdin, then prints its outcomes as JSON:
``{"big": [[status, retry_after, payload], …], "small": […]}`` (payloads only
for answers the test reads: 429s and stored big appends).
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Client:
    """One keep-alive connection with an agent key."""

    def __init__(self, port: int, key: str, timeout: float = 600) -> None:
        self.port, self.key, self.timeout = port, key, timeout
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes, float]:
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        start = time.perf_counter()
        try:
            self.conn.request("POST", f"/api/v1/{path}", body=body, headers=headers)
            response = self.conn.getresponse()
            payload = response.read()
        except (ConnectionError, http.client.HTTPException, OSError):
            # Refused before its body was read: the server closed the connection
            # (gunicorn drains at most 64 KB of an unread body).
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            return 0, {}, b"", (time.perf_counter() - start) * 1000
        if response.getheader("Connection", "").lower() == "close":
            self.conn.close()
        return (
            response.status,
            dict(response.getheaders()),
            payload,
            (time.perf_counter() - start) * 1000,
        )


def append_body(content: str) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": content}]}).encode()


@contextmanager
def flooding(
    port: int, key: str, big_sids: list[str], small_sids: list[str], big_bytes: int
) -> Iterator[dict]:
    """This agent, flooding for the duration of the ``with`` block, in its own
    process at the lowest CPU priority; the dict yielded holds its outcomes
    once the block is left."""
    agent = subprocess.Popen(
        [sys.executable, __file__, str(port), key]
        + [",".join(big_sids), ",".join(small_sids), str(big_bytes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.nice(19),
    )
    outcomes: dict = {}
    try:
        assert agent.stdout.readline().strip() == "flooding"
        yield outcomes
    finally:
        out, _ = agent.communicate("stop\n", timeout=600)
    outcomes.update(json.loads(out))


def main() -> None:
    port, key = int(sys.argv[1]), sys.argv[2]
    big_sids, small_sids, big_bytes = (
        sys.argv[3].split(","),
        sys.argv[4].split(","),
        int(sys.argv[5]),
    )
    big_body = append_body("abcdefghij" * (big_bytes // 10))
    small_body = append_body("x" * 200)
    stop = threading.Event()
    outcomes: dict[str, list] = {"big": [], "small": []}
    lock = threading.Lock()

    def flood(kind: str, sid: str, body: bytes) -> None:
        client = Client(port, key)
        while not stop.is_set():
            status, headers, payload, _ = client.post(f"sessions/{sid}/messages", body)
            kept = payload.decode() if status == 429 or (kind == "big" and status == 200) else ""
            with lock:
                outcomes[kind].append([status, headers.get("Retry-After"), kept])

    threads = [threading.Thread(target=flood, args=("big", s, big_body)) for s in big_sids]
    threads += [threading.Thread(target=flood, args=("small", s, small_body)) for s in small_sids]
    for thread in threads:
        thread.start()
    print("flooding", flush=True)
    sys.stdin.readline()
    stop.set()
    for thread in threads:
        thread.join(timeout=300)
    json.dump(outcomes, sys.stdout)


if __name__ == "__main__":
    main()
