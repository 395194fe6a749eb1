"""One key floods, another appends: the other key's latency under the flood,
run after run, with the shipped protections (and, by name, with each taken
away). Prints a table per run; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc \
    REDIS_URL=redis://127.0.0.1:6379/0 python bench/bench_flood.py
    BENCH_FLOOD_RUNS=3 BENCH_FLOOD_VARIANTS=shipped,no-cap python bench/bench_flood.py

The scenario of tests/sessions/test_starvation.py (whose assertion is the
issue's: p99 under the flood within 2x of normal): a real gunicorn, 2 workers
x 2 threads, on its own PostgreSQL database (<name>_flood). A calm key appends
one line 25 times a second, 300 times before and 300 during a flood from
another key (fakes/flood_agent.py at nice 19: three threads posting
30 MB one-word appends and three posting small ones, none waiting for
Retry-After). The flood runs BENCH_FLOOD_RUNS times (6), each on a fresh
server: the figure is the worst run, not the median. Variants:

- shipped: every protection as configured by default; the 30 MB appends are
  over the API's JSON cap (CONTEXTSVC_MAX_API_JSON_BYTES, 4 MiB) and refused
  from their headers, unread (contextsvc/bodycap.py);
- no-cap: the JSON cap raised past the flood's appends (the per-key limits
  admit about four a minute, each holding the worker's GIL ~0.4 s);
- no-hold: refused connections answered and read again at once
  (CONTEXTSVC_REFUSAL_HOLD_SECONDS=0);
- no-pace: no pacing past the burst (CONTEXTSVC_RATE_PACE=off);
- neither: no hold and no pacing;
- unlimited: no per-key limit at all (the naive way), the JSON cap raised too.

A big append's outcome is "admitted" (200), "413" (refused by the cap, the
answer read), "429" (refused by a per-key limit) or "closed" (the server closed
the connection unread before the client finished sending: a refused upload;
the client never gets to read the answer). Server CPU is the gunicorn workers'
user + system time during the flood.
"""

from __future__ import annotations

import os
import statistics
import time

from common import (  # bench/ is sys.path[0]; common puts the project root on sys.path
    Http,
    cpu_seconds,
    django_on_scratch_database,
    drop_database,
    figure,
    gunicorn,
    pct,
    recording,
    worker_pids,
)

from fakes.flood_agent import flooding

SAMPLES = int(os.environ.get("BENCH_FLOOD_SAMPLES", "300"))
RUNS = int(os.environ.get("BENCH_FLOOD_RUNS", "6"))
BIG = 30_000_000
SHIPPED = {
    "CONTEXTSVC_RATE_LIMIT": "1500/minute",
    "CONTEXTSVC_RATE_LIMIT_MB": "128/minute",
    "CONTEXTSVC_RATE_PACE": "25/second",
    "CONTEXTSVC_RATE_BURST": "50",
    "CONTEXTSVC_REFUSAL_HOLD_SECONDS": "1",
    "CONTEXTSVC_KEEP_THREAD_FREE": "true",
    "CONTEXTSVC_MAX_HEAVY_PER_KEY": "1",
    "CONTEXTSVC_MAX_CONCURRENT_PER_KEY": "0",
}
NO_CAP = {"CONTEXTSVC_MAX_API_JSON_BYTES": str(64 << 20)}
VARIANTS = {
    "shipped": {},
    "no-cap": NO_CAP,
    "no-hold": {"CONTEXTSVC_REFUSAL_HOLD_SECONDS": "0"},
    "no-pace": {"CONTEXTSVC_RATE_PACE": "off"},
    "neither": {"CONTEXTSVC_REFUSAL_HOLD_SECONDS": "0", "CONTEXTSVC_RATE_PACE": "off"},
    "unlimited": {
        **NO_CAP,
        "CONTEXTSVC_RATE_LIMIT": "off",
        "CONTEXTSVC_RATE_LIMIT_MB": "off",
        "CONTEXTSVC_RATE_PACE": "off",
        "CONTEXTSVC_KEEP_THREAD_FREE": "false",
        "CONTEXTSVC_MAX_HEAVY_PER_KEY": "0",
    },
}


BIG_OUTCOMES = {"admitted": 200, "413": 413, "429": 429, "closed": 0}


def append(content: str) -> dict:
    return {"messages": [{"role": "user", "content": content}]}


def calm_appends(port: int, key: str, sid: str, count: int) -> list[float]:
    """One-line appends at an active agent's pace (25 a second); ms each."""
    client, latencies = Http(port, key, timeout=120), []
    for n in range(count):
        started = time.perf_counter()
        status, payload, ms = client.call("POST", f"sessions/{sid}/messages", append(f"step {n}"))
        assert status == 200, payload[:300]
        latencies.append(ms)
        time.sleep(max(0.0, 0.04 - (time.perf_counter() - started)))
    return latencies


def sessions_for(run: str) -> tuple[str, str, list[str], list[str]]:
    """A calm key with one session, a flooding key with six; raw keys and ids."""
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    calm, calm_raw = agent_key_create(name=f"calm-{run}")
    flood, flood_raw = agent_key_create(name=f"flood-{run}")
    off = {"compaction": {"enabled": False}}  # the flood is about web threads
    ids = []
    for owner, sid in [(calm, f"calm-{run}")] + [(flood, f"f{n}-{run}") for n in range(6)]:
        session_create(owner=owner, data={"model": "claude-sonnet-4-5", "id": sid, "policy": off})
        ids.append(sid)
    return calm_raw, flood_raw, ids[1:4], ids[4:7]


def one_run(db_url: str, name: str, run: str) -> dict:
    os.environ.update({**SHIPPED, **VARIANTS[name]})
    calm, flood, big_sids, small_sids = sessions_for(run)
    with gunicorn(db_url, workers=2, timeout=300) as (port, server):
        workers = worker_pids(server.pid, 2)
        calm_appends(port, calm, f"calm-{run}", 20)  # warm up
        normal = calm_appends(port, calm, f"calm-{run}", SAMPLES)
        with flooding(port, flood, big_sids, small_sids, BIG) as outcomes:
            cpu_before, started = sum(cpu_seconds(p) for p in workers), time.monotonic()
            time.sleep(2)
            flooded = calm_appends(port, calm, f"calm-{run}", SAMPLES)
            seconds = time.monotonic() - started
            cpu = (sum(cpu_seconds(p) for p in workers) - cpu_before) / seconds
    big = [o[0] for o in outcomes["big"]]
    return {
        "normal": normal,
        "flooded": flooded,
        "cpu": cpu,
        "requests": sum(len(v) for v in outcomes.values()),
        "small": sum(1 for o in outcomes["small"] if o[0] == 200),
        "big": {name: big.count(status) for name, status in BIG_OUTCOMES.items()},
    }


def main() -> None:
    db_url = django_on_scratch_database("_flood")
    chosen = os.environ.get("BENCH_FLOOD_VARIANTS", "shipped").split(",")
    figure(
        f"calm key: {SAMPLES} one-line appends at 25/s before and during the flood "
        f"(2 workers x 2 threads, PostgreSQL; {RUNS} run(s) each); times in ms"
    )
    header = (
        f"{'variant':>9} {'run':>3}  {'calm p50/p99':>13}  {'flooded p50/p99':>15}  "
        f"{'p99 x':>5}  big 30 MB: admitted/413/429/closed  small ok  requests  CPU"
    )
    try:
        for name in chosen:
            print(header, flush=True)
            ratios = []
            for n in range(RUNS):
                r = one_run(db_url, name, f"{name}-{n}")
                normal, flooded = r["normal"], r["flooded"]
                ratios.append(pct(flooded, 0.99) / pct(normal, 0.99))
                big = "/".join(str(r["big"][k]) for k in BIG_OUTCOMES)
                figure(
                    f"{name:>9} run {n + 1}: "
                    f"{pct(normal, 0.5):5.1f}/{pct(normal, 0.99):6.1f}  "
                    f"{pct(flooded, 0.5):6.1f}/{pct(flooded, 0.99):7.1f}  "
                    f"{ratios[-1]:5.2f}  {big:>34}  {r['small']:8d}  {r['requests']:8d}  "
                    f"{r['cpu']:.2f}",
                    flush=True,
                )
            figure(
                f"{name:>9} p99 ratio: median {statistics.median(ratios):.2f}, "
                f"worst {max(ratios):.2f}; within 2x in {sum(x <= 2 for x in ratios)} "
                f"of {len(ratios)} runs",
                flush=True,
            )
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(db_url)


if __name__ == "__main__":
    with recording(__file__):
        main()
