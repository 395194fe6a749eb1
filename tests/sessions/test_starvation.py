"""No agent can starve another: while one key floods a real gunicorn with 30 MB
one-word appends and concurrent small ones, another key's appends keep their
normal latency (timed in rounds, without and with the flood); the flooding key's small appends are answered 429 +
Retry-After, and its 30 MB ones are refused from their headers (over the API's
JSON cap, never read) without one getting in.

Needs PostgreSQL: the server shares the test database (SQLite has one writer
for the whole file, so there one key's 30 MB write necessarily delays the
other's). Uses Redis for the shared limiter when REDIS_URL is set.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from fakes.flood_agent import Client, append_body, flooding
from sessions.services.keys import agent_key_create
from sessions.services.sessions import session_create
from tests.live_server import database_url, gunicorn

pytestmark = [pytest.mark.needs_postgres, pytest.mark.django_db(transaction=True)]

# gunicorn.conf.py's threads per worker, and the shipped per-key limits.
WORKERS, THREADS = 2, 2
BIG = 30_000_000
SAMPLES = 300  # the p99 of 120 would be the second-slowest call: too noisy
# The calm key is timed in rounds, without and then with the flood, so both
# samples share whatever else the machine runs meanwhile (under xdist, other
# tests on both cores): one block of each would compare two moments of it.
ROUNDS = 4
# The other key's p99 under the flood may be at most twice its normal p99 (the
# issue's bound), or this floor when twice normal is below what a 2-core box
# can promise call to call (a scheduler tick or a collection costs ~10 ms).
# What keeps it there: the flood's requests past a burst are paced (25 a
# second per worker, not the 130-240 a second that spent the minute's window
# in 7 s), and a refused connection is not read again until its Retry-After
# (the flood sent ~2,000 requests a second, each parsed before it was refused;
# now ~60). bench/bench_flood.py takes each away: on the idle box, 3 runs
# each, the p99 ratio was 1.1-1.4x shipped, 1.5-3.2x without the hold,
# 1.4-1.5x without pacing, 1.4-2.5x without either, 24-62x without any limit
# (normal p99 6-11 ms).
FLOOR_MS = 20


@pytest.fixture
def server(tmp_path):
    """A real gunicorn on the test database: a small pool of WORKERS x THREADS."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CONTEXTSVC_RATE", "CONTEXTSVC_MAX_CONC", "CONTEXTSVC_WEB"))
    }  # the limits as shipped
    env.update(DATABASE_URL=database_url(), DEBUG="false", LOG_LEVEL="WARNING")
    args = ("-w", str(WORKERS), "--threads", str(THREADS), "--timeout", "300")
    with gunicorn(env, tmp_path / "gunicorn.log", *args) as port:
        yield port


def pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def p99(values: list[float]) -> float:
    return pct(values, 0.99)


def timed_appends(port: int, key: str, sid: str, count: int = SAMPLES) -> list[float]:
    """One-line appends at an active agent's pace (25 a second)."""
    client, latencies = Client(port, key, timeout=60), []
    for n in range(count):
        started = time.perf_counter()
        status, _, payload, ms = client.post(
            f"sessions/{sid}/messages", append_body(f"step {n}: ok")
        )
        assert status == 200, payload[:300]
        latencies.append(ms)
        time.sleep(max(0.0, 0.04 - (time.perf_counter() - started)))
    return latencies


def session_for(key, sid: str) -> str:
    # Compaction off: the flood is about the web threads, not the worker.
    session_create(
        owner=key,
        data={
            "model": "claude-sonnet-4-5",
            "id": sid,
            "policy": {"compaction": {"enabled": False}},
        },
    )
    return sid


def test_one_key_flooding_does_not_starve_another(server):
    port = server
    calm_key, calm_raw = agent_key_create(name="calm")
    flood_key, flood_raw = agent_key_create(name="flood")
    calm_sid = session_for(calm_key, "calm")
    big_sids = [session_for(flood_key, f"big{n}") for n in range(3)]
    small_sids = [session_for(flood_key, f"small{n}") for n in range(3)]

    timed_appends(port, calm_raw, calm_sid, 20)  # warm the workers up
    normal, flooded = [], []
    outcomes: dict[str, list] = {"big": [], "small": []}
    for _ in range(ROUNDS):
        normal += timed_appends(port, calm_raw, calm_sid, SAMPLES // ROUNDS)
        # The flooding agent runs in its own process at the lowest CPU priority:
        # in a real deployment its CPU is not the server's (fakes/flood_agent.py).
        with flooding(port, flood_raw, big_sids, small_sids, BIG) as round_outcomes:
            time.sleep(2)  # the big appends are being read and counted
            flooded += timed_appends(port, calm_raw, calm_sid, SAMPLES // ROUNDS)
        for kind, runs in round_outcomes.items():
            outcomes[kind] += runs

    bound = max(2 * p99(normal), FLOOR_MS)
    report = (
        f"calm key p50/p99: normal {pct(normal, 0.5):.1f}/{p99(normal):.0f} ms, "
        f"under flood {pct(flooded, 0.5):.1f}/{p99(flooded):.0f} ms "
        f"({p99(flooded) / p99(normal):.1f}x at p99; bound {bound:.0f} ms); flood outcomes: "
        + ", ".join(
            f"{kind} " + str(sorted({o[0] for o in runs})) + f" x{len(runs)}"
            for kind, runs in outcomes.items()
        )
    )
    print(report)
    assert p99(flooded) <= bound, report

    # The flooding key was refused with 429 + Retry-After in the error body.
    refused = [o for runs in outcomes.values() for o in runs if o[0] == 429]
    assert refused, report
    for _, retry_after, payload in refused:
        retry_after = int(retry_after)
        error = json.loads(payload)["error"]
        assert error["code"] == "RATE_LIMITED" and error["details"]["retry_after"] == retry_after
    # No 5xx for anyone. No 30 MB append got in: each was refused unread, its
    # connection closed before the client had sent it all (0), or answered first.
    assert not [o for runs in outcomes.values() for o in runs if o[0] >= 500], report
    big = {o[0] for o in outcomes["big"]}
    assert outcomes["big"] and big <= {0, 413, 429}, report
