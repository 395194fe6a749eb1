"""Responses API benchmarks through the proxy. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_responses.py

Uses its own database (<name>_responses, created and migrated here), the
fake Responses upstream (fakes/responses_server.py) and the proxy served
as deployed: gunicorn with one uvicorn worker on ``contextsvc.asgi``.

1. Added time to first event: a streamed ``POST /responses`` direct to the
   fake vs through the proxy (each call adds a reply and a user turn), after
   a history of BENCH_HISTORIES (200 and 2,000) tool-call items: p50 / p99
   (target p50 ≤ 15 ms, p99 ≤ 50 ms), and the proxy worker's CPU time per call
   (load-independent; it must not grow with the history).
2. The same Codex CLI task (BENCH_CODEX_STEPS shell steps with large outputs,
   then the answer) straight to the fake and through the proxy (a session of
   48,000 tokens): input tokens the upstream was sent in all (the fake's
   count: JSON characters / 4), calls, and wall time. Skipped when the Codex
   CLI is not installed (bin/test installs it).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import (
    OUT_OF_REACH,
    ROOT,
    against,
    client_gc_paused,
    cpu_seconds,
    django_on_scratch_database,
    growth,
    pct,
    proxy_process,
    worker_pids,
)

sys.path.insert(0, str(ROOT))

HISTORIES = [int(n) for n in os.environ.get("BENCH_HISTORIES", "200,2000").split(",")]
CALLS = int(os.environ.get("BENCH_CALLS", "60"))
CODEX_STEPS = int(os.environ.get("BENCH_CODEX_STEPS", "20"))
KEY = "sk-bench-upstream"
MODEL = "gpt-5.1-codex"


def first_event(url: str, body: dict, headers: dict) -> float:
    """Seconds to the first byte of the event stream (the stream is read to its end)."""
    started = time.perf_counter()
    first = None
    with httpx.stream("POST", url, json=body, headers=headers, timeout=300) as response:
        assert response.status_code == 200, response.read()[:300]
        for _ in response.iter_raw():
            first = first or time.perf_counter()
    return (first or time.perf_counter()) - started


def turn(n: int) -> list[dict]:
    call = f"call_bench_{n}"
    return [
        {"type": "function_call", "call_id": call, "name": "exec_command",
         "arguments": f'{{"cmd": "step {n}"}}'},
        {"type": "function_call_output", "call_id": call, "output": f"output {n} " * 40},
    ]  # fmt: skip


def added_first_event(
    proxy: str, fake, agent_key: str, size: int, worker: int
) -> tuple[list[float], float]:
    """The added time to first event of each call (ms), and the worker's CPU per call (ms)."""
    headers = {"authorization": f"Bearer {KEY}"}
    session = f"ses_bench_r{size}"
    proxied = {**headers, "x-contextsvc-key": agent_key, "x-contextsvc-session": session}
    items: list[dict] = [{"role": "user", "content": "start"}]
    for n in range(size // 2):
        items += turn(n)
    body = {"model": MODEL, "stream": True, "store": False, "tools": TOOLS}
    first_event(proxy, {**body, "input": items}, proxied)  # the first sync
    direct, through, cpu = [], [], 0.0
    for n in range(CALLS):
        # the reply (the proxy's stored one is taken as echoed) and the next user turn
        items += [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"reply {n}"}],
            },
            {"role": "user", "content": f"turn {n}"},
        ]
        with client_gc_paused():
            direct.append(
                first_event(f"{fake.base_url}/v1/responses", {**body, "input": items}, headers)
            )
            before = cpu_seconds(worker)
            through.append(first_event(proxy, {**body, "input": items}, proxied))
        time.sleep(0.05)  # the reply is stored after the stream ends: count it too
        cpu += cpu_seconds(worker) - before
    return [(b - a) * 1000 for a, b in zip(direct, through, strict=True)], cpu / CALLS * 1000


TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]


def codex_task(base_url: str, fake, headers: dict) -> tuple[int, int, float]:
    """(input tokens upstream was sent, calls, wall seconds) of one Codex run."""
    from fakes.codex import ShellLoop, run_codex
    from fakes.responses_server import estimate_tokens

    fake.responder = ShellLoop(CODEX_STEPS)
    before = len(fake.requests)
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        run = run_codex(
            base_url=base_url, api_key=KEY, task="Run the steps.", scratch=Path(scratch),
            headers=headers,
        )  # fmt: skip
        wall = time.perf_counter() - started
    if run.returncode != 0:
        print("   codex failed:", run.stderr[-500:])
    sent = [r.body for r in fake.requests[before:] if r.body]
    return sum(estimate_tokens(b) for b in sent), len(sent), wall


def main() -> None:
    os.environ.update(OUT_OF_REACH)
    db_url = django_on_scratch_database("responses")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    from fakes.responses_server import FakeResponses
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    key, agent_key = agent_key_create(name="bench")
    fake = FakeResponses(api_key=KEY).start()
    port, server = proxy_process(db_url, CONTEXTSVC_UPSTREAM_OPENAI_URL=f"{fake.base_url}/v1")
    proxy = f"http://127.0.0.1:{port}/proxy/openai/v1"
    try:
        print(f"(figures taken on a shared machine: load average {os.getloadavg()[0]:.1f})")
        print(f"1. added time to first event over direct ({CALLS} calls), worker CPU per call:")
        worker = worker_pids(server.pid)[0]
        cpus = {}
        for size in HISTORIES:
            added, cpus[size] = added_first_event(
                f"{proxy}/responses", fake, agent_key, size, worker
            )
            print(
                f"   {size:>5}+ items: p50 {against(pct(added, 0.5), 15)}  "
                f"p99 {against(pct(added, 0.99), 50)}  CPU {cpus[size]:.2f} ms/call"
            )
        print(f"   CPU per call {growth(cpus)}")
        from fakes.codex import codex_binary

        try:
            codex_binary()
        except FileNotFoundError:
            print("2. Codex CLI not installed (bin/test --agents installs it): skipped")
            return
        straight = codex_task(f"{fake.base_url}/v1", fake, {})
        session_create(
            owner=key,
            data={"id": "ses_bench_codex", "model": MODEL, "context_window": 48_000,
                  "max_output_tokens": 4_000},
        )  # fmt: skip
        through = codex_task(
            proxy, fake, {"X-Contextsvc-Key": agent_key, "X-Contextsvc-Session": "ses_bench_codex"}
        )
        print(f"2. Codex task, {CODEX_STEPS} shell steps:")
        for name, (tokens, calls, wall) in (("straight", straight), ("proxied", through)):
            print(f"   {name:>8}: {tokens:>8,} input tokens in {calls} calls, {wall:.1f} s")
    finally:
        server.terminate()
        server.wait(timeout=30)
        fake.stop()


if __name__ == "__main__":
    main()
