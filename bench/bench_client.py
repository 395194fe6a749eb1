"""What the Python client (clients/python) adds to a call over raw httpx. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_client.py

One gunicorn on a scratch database; the same calls (a 2-message append with an
Idempotency-Key, GET /budget, GET /context) sent alternately in blocks by raw
``httpx.Client`` and by ``contextsvc_client`` (sync, then async), each over one
keep-alive connection. The server's time is the same for both: what differs is
the client process, so the figures are this process's CPU time per call
(``time.process_time``, stable on a busy machine) and, beside it, wall-clock p50.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

import httpx
from common import django_on_scratch_database, drop_database, figure, gunicorn, pct, recording
from contextsvc_client import AsyncClient, Client

N = 600  # calls per kind and per side
BLOCK = 50  # raw and client alternate every BLOCK calls (load changes hit both)
BATCH = [
    {"role": "user", "content": "Run the tests and tell me what fails."},
    {"role": "assistant", "content": "Running them now; 2 failures in the parser."},
]


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


async def _atimed(fn: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    await fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def _report(kind: str, raw: list[tuple[float, float]], ours: list[tuple[float, float]]) -> None:
    raw_cpu = sum(c for c, _ in raw) / len(raw) * 1e3
    our_cpu = sum(c for c, _ in ours) / len(ours) * 1e3
    raw_p50 = pct([w for _, w in raw], 0.5) * 1e3
    our_p50 = pct([w for _, w in ours], 0.5) * 1e3
    figure(
        f"{kind:<26} client CPU/call: httpx {raw_cpu:.3f} ms, contextsvc_client {our_cpu:.3f} ms "
        f"({our_cpu - raw_cpu:+.3f} ms) | wall p50: {raw_p50:.2f} vs {our_p50:.2f} ms "
        f"({our_p50 - raw_p50:+.2f} ms)"
    )


def _sync(base: str, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"{base}/api/v1", headers=headers) as raw, Client(base, key) as ours:
        sid = ours.create_session("claude-sonnet-4-5", context_window=1_000_000).id
        session = ours.session(sid)
        calls = {
            "append (2 messages)": (
                lambda: raw.post(
                    f"/sessions/{sid}/messages",
                    json={"messages": BATCH},
                    headers={"Idempotency-Key": uuid.uuid4().hex},
                ).json(),
                lambda: session.append(BATCH),
            ),
            "GET budget": (
                lambda: raw.get(f"/sessions/{sid}/budget").json(),
                lambda: session.budget(),
            ),
            "GET context (openai)": (
                lambda: raw.get(f"/sessions/{sid}/context", params={"format": "openai"}).json(),
                lambda: session.context("openai"),
            ),
        }
        for kind, (raw_call, our_call) in calls.items():
            raw_times, our_times = [], []
            for _ in range(N // BLOCK):
                raw_times += [_timed(raw_call) for _ in range(BLOCK)]
                our_times += [_timed(our_call) for _ in range(BLOCK)]
            _report(f"sync {kind}", raw_times, our_times)


async def _async(base: str, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx.AsyncClient(base_url=f"{base}/api/v1", headers=headers) as raw,
        AsyncClient(base, key) as ours,
    ):
        session = await ours.create_session("claude-sonnet-4-5", context_window=1_000_000)

        async def raw_append() -> object:
            response = await raw.post(
                f"/sessions/{session.id}/messages",
                json={"messages": BATCH},
                headers={"Idempotency-Key": uuid.uuid4().hex},
            )
            return response.json()

        raw_times, our_times = [], []
        for _ in range(N // BLOCK):
            raw_times += [await _atimed(raw_append) for _ in range(BLOCK)]
            our_times += [await _atimed(lambda: session.append(BATCH)) for _ in range(BLOCK)]
        _report("async append", raw_times, our_times)


def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    db_url = django_on_scratch_database("_bench_client")
    # Only importable once Django is set up on the scratch database.
    from sessions.services.keys import agent_key_create

    _, key = agent_key_create(name="bench-client")
    try:
        with gunicorn(db_url, workers=2) as (port, _):
            base = f"http://127.0.0.1:{port}"
            print(f"{N} calls per kind and side, alternating in blocks of {BLOCK}")
            _sync(base, key)
            asyncio.run(_async(base, key))
    finally:
        drop_database(db_url)


if __name__ == "__main__":
    with recording(__file__):
        main()
