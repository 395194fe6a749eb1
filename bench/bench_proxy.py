"""Proxy benchmarks. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_proxy.py

Uses its own database (<name>_proxy, created and migrated here), the fake
Anthropic upstream (fakes/) and the proxy served as deployed: gunicorn
with one uvicorn worker on ``contextsvc.asgi``.

1. Added time to first byte: a streaming call direct to the fake vs through
   the proxy (each call adds one turn), with a history of 200 and of 2,000
   messages (BENCH_HISTORIES): p50 / p99, and the proxy worker's CPU time per
   call (load-independent, unlike the wall-clock figures on a shared machine).
   Neither must grow with the session: only what follows the client's
   previous request is fingerprinted, converted and written. Beside them, the
   proxy's own time before forwarding (its ``Server-Timing``): the added TTFB
   also holds the fake's own work on a different body (the managed one), which
   at 2,000 messages is tens of milliseconds either way.
2. Relay delay per chunk: the gap between the fake's chunks as the client sees
   them, direct vs proxied (the fake pauses ``stream_delay`` between events).
3. CPU per call: the proxy worker's CPU time over BENCH_CPU_CALLS (100) turns of
   a loop through the proxy, vs the REST worker's (gunicorn, WSGI) for the same
   loop through the REST API (append the user turn, GET /context, append the
   reply, POST /usage; the model called directly). Target: proxy ≤ REST + 20 %.
4. BENCH_STREAMS (64) concurrent streams of ~BENCH_STREAM_SECONDS (10; the
   target is stated for 30) each held by the one worker: errors and the
   worker's peak RSS (target ≤ 300 MB).
5. Gemini beside Chat Completions (``bench_proxy_gemini.py``, which also runs
   alone; BENCH_GEMINI=0 skips it here): added TTFB and CPU per call of both,
   their ratio (target ≤ 1.10), the load average beside each figure.
"""

from __future__ import annotations

import json
import logging
import os
import re
import statistics
import threading
import time

import httpx
from bench_proxy_gemini import gemini_vs_chat
from common import (
    OUT_OF_REACH,
    Http,
    Peak,
    against,
    client_gc_paused,
    cpu_seconds,
    django_on_scratch_database,
    growth,
    gunicorn,
    mb,
    pct,
    proc_status,
    proxy_process,
    worker_pids,
)

HISTORIES = [int(n) for n in os.environ.get("BENCH_HISTORIES", "200,2000").split(",")]
CALLS = int(os.environ.get("BENCH_CALLS", "60"))
CPU_CALLS = int(os.environ.get("BENCH_CPU_CALLS", "100"))
STREAMS = int(os.environ.get("BENCH_STREAMS", "64"))
STREAM_SECONDS = float(os.environ.get("BENCH_STREAM_SECONDS", "10"))
KEY = "sk-bench-upstream"
MODEL = "claude-opus-4-5"


def history(n: int) -> list[dict]:
    out = []
    for i in range(n // 2):
        out.append({"role": "user", "content": f"step {i}: " + "please look at the handler " * 20})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"done {i}"}]})
    return out


PROXY_DUR = re.compile(r"proxy;dur=([0-9.]+)")


def ttfb(
    url: str, body: dict, headers: dict, own: list[float] | None = None
) -> tuple[float, list[float], bytes]:
    """Seconds to the first body byte, the arrival times of every chunk, the body.
    ``own``: the proxy's own time before forwarding (its Server-Timing) is appended."""
    started = time.perf_counter()
    first, arrivals, raw = None, [], []
    with httpx.stream("POST", url, json=body, headers=headers, timeout=300) as response:
        assert response.status_code == 200, response.read()[:300]
        if own is not None:
            own.append(float(PROXY_DUR.search(response.headers["server-timing"]).group(1)))
        for chunk in response.iter_raw():
            now = time.perf_counter()
            first = first or now
            arrivals.append(now)
            raw.append(chunk)
    return (first or time.perf_counter()) - started, arrivals, b"".join(raw)


def reply_text(raw: bytes) -> str:
    """The text of a Messages stream (its text deltas)."""
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                out.append(delta["text"])
    return "".join(out)


class Bench:
    def __init__(self, agent_key: str, fake, port: int) -> None:
        self.fake = fake
        self.headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        self.proxied = {**self.headers, "x-contextsvc-key": agent_key}
        self.direct_url = f"{fake.base_url}/v1/messages"
        self.proxy_url = f"http://127.0.0.1:{port}/proxy/anthropic/v1/messages"
        self.body = {"model": MODEL, "max_tokens": 500, "stream": True}

    def added_ttfb(self, size: int, worker: int) -> tuple[list[float], float, list[float]]:
        """The added TTFB of each call (ms), the worker's CPU per proxied call (ms), and
        the proxy's own time before forwarding each call (ms, its Server-Timing)."""
        proxied = {**self.proxied, "x-contextsvc-session": f"ses_bench_{size}"}
        messages = history(size) + [{"role": "user", "content": "next"}]
        ttfb(self.proxy_url, {**self.body, "messages": messages}, proxied)  # the first sync
        direct, through, cpu, own = [], [], 0.0, []
        for n in range(CALLS):
            messages += [
                {"role": "assistant", "content": [{"type": "text", "text": f"reply {n}"}]},
                {"role": "user", "content": f"turn {n}"},
            ]
            body = {**self.body, "messages": messages}
            with client_gc_paused():
                direct.append(ttfb(self.direct_url, body, self.headers)[0])
                before = cpu_seconds(worker)
                through.append(ttfb(self.proxy_url, body, proxied, own)[0])
            time.sleep(0.05)  # the reply is stored after the stream ends: count it too
            cpu += cpu_seconds(worker) - before
        added = [(b - a) * 1000 for a, b in zip(direct, through, strict=True)]
        return added, cpu / CALLS * 1000, own

    def chunk_gaps(self) -> dict[str, float]:
        self.fake.stream_delay = 0.02
        messages = history(20) + [{"role": "user", "content": "next"}]
        proxied = {**self.proxied, "x-contextsvc-session": "ses_bench_gaps"}
        gaps = {}
        for name, url, hdrs in (
            ("direct", self.direct_url, self.headers),
            ("proxy", self.proxy_url, proxied),
        ):
            _, arrivals, _ = ttfb(url, {**self.body, "messages": messages}, hdrs)
            steps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
            gaps[name] = statistics.mean(steps) * 1000 if steps else 0.0
        self.fake.stream_delay = 0.0
        return gaps

    def proxy_loop(self, calls: int) -> None:
        proxied = {**self.proxied, "x-contextsvc-session": "ses_cpu_proxy"}
        messages = [{"role": "user", "content": "start"}]
        for n in range(calls):
            _, _, raw = ttfb(self.proxy_url, {**self.body, "messages": messages}, proxied)
            messages += [
                {"role": "assistant", "content": [{"type": "text", "text": reply_text(raw)}]},
                {"role": "user", "content": f"turn {n}: " + "please look at the handler " * 20},
            ]

    def rest_loop(self, api: Http, calls: int) -> None:
        sid = "ses_cpu_rest"
        api.call("POST", "sessions", {"id": sid, "model": MODEL, "max_output_tokens": 500})
        user: dict = {"role": "user", "content": "start"}
        for n in range(calls):
            api.call("POST", f"sessions/{sid}/messages", {"messages": [user]})
            status, context, _ = api.call("GET", f"sessions/{sid}/context?format=anthropic")
            assert status == 200, context[:300]
            built = json.loads(context)
            built.pop("budget", None)
            _, _, raw = ttfb(self.direct_url, {**self.body, **built}, self.headers)
            reply = {"role": "assistant", "content": reply_text(raw)}
            api.call("POST", f"sessions/{sid}/messages", {"messages": [reply]})
            usage = {"input_tokens": 100, "output_tokens": 10}
            api.call("POST", f"sessions/{sid}/usage", usage)
            user = {"role": "user", "content": f"turn {n}: " + "please look at the handler " * 20}

    def streams(self, worker: int) -> tuple[list[str], float, int, int]:
        # Each stream: ~10 events at STREAM_SECONDS / 10 apart.
        self.fake.stream_delay = STREAM_SECONDS / 10
        errors: list[str] = []

        def one(i: int) -> None:
            hdrs = {**self.proxied, "x-contextsvc-session": f"ses_stream_{i}"}
            body = {**self.body, "messages": [{"role": "user", "content": "hi"}]}
            try:
                ttfb(self.proxy_url, body, hdrs)
            except Exception as exc:  # noqa: BLE001 - counted
                errors.append(repr(exc))

        started = time.perf_counter()
        with Peak(worker) as peak:
            threads = [threading.Thread(target=one, args=(i,)) for i in range(STREAMS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        elapsed = time.perf_counter() - started
        return errors, elapsed, peak.growth, proc_status(worker, "VmHWM")


def main() -> None:
    os.environ.update(OUT_OF_REACH)
    db_url = django_on_scratch_database("proxy")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    from fakes.anthropic_server import FakeAnthropic
    from fakes.streams import QuietServer
    from sessions.services.keys import agent_key_create

    # 64 streams connect at once: socketserver's backlog of 5 would reset some
    # of the proxy's connections to the fake (an error of the fake, not the proxy).
    QuietServer.request_queue_size = 256

    _, agent_key = agent_key_create(name="bench")
    fake = FakeAnthropic(api_key=KEY).start()
    port, server = proxy_process(db_url, CONTEXTSVC_UPSTREAM_ANTHROPIC_URL=fake.base_url)
    try:
        bench = Bench(agent_key, fake, port)
        worker = worker_pids(server.pid)[0]
        print(f"(figures taken on a shared machine: load average {os.getloadavg()[0]:.1f})")
        print(f"1. added TTFB over direct ({CALLS} calls each), proxy worker CPU per call:")
        cpus = {}
        for size in HISTORIES:
            added, cpus[size], own = bench.added_ttfb(size, worker)
            print(
                f"   {size:>5}+ messages: p50 {against(pct(added, 0.5), 15)}  "
                f"p99 {against(pct(added, 0.99), 50)}  CPU {cpus[size]:.2f} ms/call"
                f"  (load {os.getloadavg()[0]:.1f})"
            )
            print(
                f"          the proxy's own work before forwarding (Server-Timing): "
                f"p50 {pct(own, 0.5):.1f} ms  p99 {pct(own, 0.99):.1f} ms"
            )
            slowest = sorted(enumerate(added), key=lambda item: -item[1])[:3]
            print(
                "          slowest calls (#, ms): "
                + ", ".join(f"{i} {ms:.1f}" for i, ms in slowest)
            )
        print(f"   CPU per call {growth(cpus)}  (load {os.getloadavg()[0]:.1f})")
        gaps = bench.chunk_gaps()
        print(
            f"2. mean gap between chunks: direct {gaps['direct']:.2f} ms, "
            f"proxied {gaps['proxy']:.2f} ms (added {against(gaps['proxy'] - gaps['direct'], 5)})"
            f"  (load {os.getloadavg()[0]:.1f})"
        )
        before = cpu_seconds(worker)
        bench.proxy_loop(CPU_CALLS)
        proxy_cpu = (cpu_seconds(worker) - before) / CPU_CALLS * 1000
        with gunicorn(db_url, workers=1) as (rest_port, rest_server):
            rest_worker = worker_pids(rest_server.pid)[0]
            api = Http(rest_port, agent_key)
            api.call("GET", "sessions")  # warm the worker up
            before = cpu_seconds(rest_worker)
            bench.rest_loop(api, CPU_CALLS)
            rest_cpu = (cpu_seconds(rest_worker) - before) / CPU_CALLS * 1000
        ratio = proxy_cpu / rest_cpu
        print(
            f"3. server CPU per turn ({CPU_CALLS} turns): proxy {proxy_cpu:.2f} ms, "
            f"REST {rest_cpu:.2f} ms (ratio {against(ratio, 1.2, '×')})"
            f"  (load {os.getloadavg()[0]:.1f})"
        )
        errors, elapsed, growth_rss, peak = bench.streams(worker)
        print(
            f"4. {STREAMS} concurrent {STREAM_SECONDS:.0f}-second streams (target stated for 30) "
            f"in {elapsed:.1f} s: {len(errors)} errors (target 0), worker RSS growth "
            f"{mb(growth_rss)}, peak {against(peak / 1e6, 300, 'MB')}"
            f"  (load {os.getloadavg()[0]:.1f})"
        )
        if errors:
            print("   first error:", errors[0])
        if os.environ.get("BENCH_GEMINI", "1") == "1":
            gemini_vs_chat(db_url, agent_key)
    finally:
        server.terminate()
        server.wait(timeout=30)
        fake.stop()


if __name__ == "__main__":
    main()
