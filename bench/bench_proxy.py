"""Proxy benchmarks. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_proxy.py

Uses its own database (<name>_proxy, created and migrated here), the fake
Anthropic upstream (tests/fakes) and the proxy served as deployed: gunicorn
with one uvicorn worker on ``contextsvc.asgi``.

1. Added time to first byte: a streaming call with a 200-message history,
   direct to the fake vs through the proxy (each call adds one turn): p50 / p99.
2. Relay delay per chunk: the gap between the fake's chunks as the client sees
   them, direct vs proxied (the fake pauses ``stream_delay`` between events).
3. BENCH_STREAMS (64) concurrent streams of ~BENCH_STREAM_SECONDS (10) each held
   by the one worker: errors and the worker's peak RSS.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx
from common import (
    ROOT,
    Peak,
    django_on_scratch_database,
    free_port,
    mb,
    pct,
    proc_status,
    worker_pids,
)

HISTORY = 200
CALLS = int(os.environ.get("BENCH_CALLS", "60"))
STREAMS = int(os.environ.get("BENCH_STREAMS", "64"))
STREAM_SECONDS = float(os.environ.get("BENCH_STREAM_SECONDS", "10"))
KEY = "sk-bench-upstream"


def proxy_process(db_url: str, upstream: str) -> tuple[int, subprocess.Popen]:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "CONTEXTSVC_UPSTREAM_ANTHROPIC_URL": upstream,
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "contextsvc.asgi:application"]
        + ["-k", "uvicorn_worker.UvicornWorker", "-w", "1", "-b", f"127.0.0.1:{port}"]
        + ["--log-level", "warning", "--timeout", "300"],
        cwd=ROOT,
        env=env,
    )
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return port, server
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the proxy did not start")


def history(n: int) -> list[dict]:
    out = []
    for i in range(n // 2):
        out.append({"role": "user", "content": f"step {i}: " + "please look at the handler " * 20})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"done {i}"}]})
    return out


def ttfb(url: str, body: dict, headers: dict) -> tuple[float, list[float]]:
    """Seconds to the first body byte, and the arrival times of every chunk."""
    started = time.perf_counter()
    first, arrivals = None, []
    with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as response:
        assert response.status_code == 200, response.read()[:300]
        for _ in response.iter_raw():
            now = time.perf_counter()
            first = first or now
            arrivals.append(now)
    return (first or time.perf_counter()) - started, arrivals


def main() -> None:
    db_url = django_on_scratch_database("proxy")
    from sessions.services.keys import agent_key_create
    from tests.fakes.anthropic_server import FakeAnthropic

    _, agent_key = agent_key_create(name="bench")
    fake = FakeAnthropic(api_key=KEY).start()
    port, server = proxy_process(db_url, fake.base_url)
    try:
        headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        proxied = {**headers, "x-contextsvc-key": agent_key, "x-contextsvc-session": "ses_bench"}
        direct_url = f"{fake.base_url}/v1/messages"
        proxy_url = f"http://127.0.0.1:{port}/proxy/anthropic/v1/messages"
        messages = history(HISTORY) + [{"role": "user", "content": "next"}]
        body = {"model": "claude-opus-4-5", "max_tokens": 500, "stream": True}
        ttfb(proxy_url, {**body, "messages": messages}, proxied)  # the first sync: 200 appends
        direct, through = [], []
        for n in range(CALLS):
            messages += [
                {"role": "assistant", "content": [{"type": "text", "text": f"reply {n}"}]},
                {"role": "user", "content": f"turn {n}"},
            ]
            direct.append(ttfb(direct_url, {**body, "messages": messages}, headers)[0])
            through.append(ttfb(proxy_url, {**body, "messages": messages}, proxied)[0])
        added = [(b - a) * 1000 for a, b in zip(direct, through, strict=True)]
        print(f"1. added TTFB over direct ({CALLS} calls, {HISTORY}+ messages):")
        print(f"   p50 {pct(added, 0.5):.1f} ms  p99 {pct(added, 0.99):.1f} ms")

        fake.stream_delay = 0.02
        gaps = {}
        for name, url, hdrs in (("direct", direct_url, headers), ("proxy", proxy_url, proxied)):
            _, arrivals = ttfb(url, {**body, "messages": messages}, hdrs)
            steps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
            gaps[name] = statistics.mean(steps) * 1000 if steps else 0.0
        print(
            f"2. mean gap between chunks: direct {gaps['direct']:.2f} ms, "
            f"proxied {gaps['proxy']:.2f} ms (added {gaps['proxy'] - gaps['direct']:.2f} ms)"
        )

        # Each stream: ~10 events at STREAM_SECONDS / 10 apart.
        fake.stream_delay = STREAM_SECONDS / 10
        errors: list[str] = []

        def one(i: int) -> None:
            hdrs = {**proxied, "x-contextsvc-session": f"ses_stream_{i}"}
            try:
                ttfb(proxy_url, {**body, "messages": [{"role": "user", "content": "hi"}]}, hdrs)
            except Exception as exc:  # noqa: BLE001 - counted
                errors.append(repr(exc))

        worker = worker_pids(server.pid)[0]
        started = time.perf_counter()
        with Peak(worker) as peak:
            threads = [threading.Thread(target=one, args=(i,)) for i in range(STREAMS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        print(
            f"3. {STREAMS} concurrent streams in {time.perf_counter() - started:.1f} s: "
            f"{len(errors)} errors, worker RSS growth {mb(peak.growth)}, "
            f"peak {mb(proc_status(worker, 'VmHWM'))}"
        )
        if errors:
            print("   first error:", errors[0])
    finally:
        server.terminate()
        server.wait(timeout=30)
        fake.stop()


if __name__ == "__main__":
    main()
