"""Append and context benchmarks. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_append.py

Uses its own database (<name>_bench, created and migrated here) and a real
gunicorn on a free loopback port, with the project's gunicorn.conf.py
(threaded workers, keep-alive); BENCH_WORKERS sets the worker count (4) and
BENCH_GUNICORN_ARGS adds flags (e.g. "-k sync --threads 1" for the old way).
Message text comes from the recorded agent trajectories of the workloads folder
(``CONTEXTSVC_SHARED``)
when present (synthetic otherwise).

1. 3-message batches over HTTP, 4 concurrent keep-alive clients: p50 / p99.
2. Flat cost: mean append time with 100 vs 10,000 prior messages, beside the
   naive way (re-counting the whole history on every append).
3. GET context?format=anthropic for a live window of 1,000 messages / ~150k tokens.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from contextlib import ExitStack

from common import (  # bench/ is sys.path[0] when run as a script
    ROOT,
    Http,
    Peak,
    django_on_scratch_database,
    figure,
    gunicorn,
    mb,
    pct,
    proc_status,
    recording,
    worker_pids,
)

WORKLOADS = ROOT.parent / "shared" / "workloads" / "real"


def sample_texts() -> list[str]:
    texts = []
    for path in sorted(WORKLOADS.glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            content = json.loads(line).get("content")
            if isinstance(content, str) and 200 <= len(content) <= 4000:
                texts.append(content)
    return texts or [("def handler(event):\n    return process(event['body'])\n" * 12)]


def main() -> None:
    db_url = django_on_scratch_database("_bench")
    from contextsvc.engine.tokens import estimate_message
    from sessions import accounting
    from sessions.models import Message, Session
    from sessions.services.append import session_append_messages
    from sessions.services.keys import agent_key_create
    from sessions.services.prepare import to_engine_message
    from sessions.services.sessions import session_create

    texts = sample_texts()
    key, raw = agent_key_create(name="bench")

    def seed(sid: str, n: int, *, window: int = 1_000_000) -> Session:
        session = session_create(
            owner=key,
            data={
                "model": "claude-sonnet-4-5",
                "id": sid,
                "context_window": window,
                "max_output_tokens": 8_000,
            },
        )
        for start in range(0, n, 200):
            batch = [
                {
                    "role": "user" if (start + i) % 2 == 0 else "assistant",
                    "content": texts[(start + i) % len(texts)],
                }
                for i in range(min(200, n - start))
            ]
            session_append_messages(session=session, messages=batch)
        return Session.objects.get(pk=session.pk)

    print(f"seeding sessions ({len(texts)} distinct texts from workloads)…", flush=True)
    seed("short", 100)
    seed("long", 10_000)
    ctx = seed("ctx", 0)
    # ~150 tokens each: 1,000 messages ≈ 150k tokens in the live window
    per = [t for t in texts if 500 <= len(t) <= 700] or texts
    for start in range(0, 1000, 200):
        session_append_messages(
            session=ctx,
            messages=[
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": per[(start + i) % len(per)],
                }
                for i in range(200)
            ],
        )
    ctx.refresh_from_db()
    for n in range(40):
        seed(f"load{n}", 0)

    workers = int(os.environ.get("BENCH_WORKERS", "4"))
    with gunicorn(db_url, workers=workers) as (port, server):
        run_http(port, raw, texts, ctx, worker_pids(server.pid, workers))

    # Naive way: each append re-counts the whole history (what we never do).
    tokenizer = accounting.get_tokenizer("tiktoken:cl100k_base")

    def naive_cost(sid: str) -> float:
        rows = Message.objects.filter(session__external_id=sid).values_list("role", "content")
        start = time.perf_counter()
        for role, content in rows:
            estimate_message(to_engine_message({"role": role, "content": content}), tokenizer)
        return (time.perf_counter() - start) * 1000

    naive_short, naive_long = naive_cost("short"), naive_cost("long")
    figure(
        f"naive re-count per append: {naive_short:.1f} ms at 100 prior, {naive_long:.1f} ms at 10,000 prior "
        f"→ ratio {naive_long / max(naive_short, 1e-6):.1f}x (plus the append itself)"
    )


def run_http(port: int, raw: str, texts: list[str], ctx, pids: list[int]) -> None:
    def batch(i: int) -> dict:
        roles = ("user", "assistant", "user")
        return {
            "messages": [
                {"role": role, "content": texts[(i + k) % len(texts)]}
                for k, role in enumerate(roles)
            ]
        }

    # warm up every worker (tokenizer load, connections)
    for i in range(40):
        Http(port, raw).call("POST", f"sessions/load{i % 40}/messages", batch(i))

    # 1. four concurrent clients, each on its own session
    latencies: list[float] = []
    lock = threading.Lock()
    per_client = 500

    def client(n: int) -> None:
        http_ = Http(port, raw)
        mine = []
        for i in range(per_client):
            status, _, ms = http_.call(
                "POST", f"sessions/load{n * 10 + i % 10}/messages", batch(i + n)
            )
            assert status == 200, status
            mine.append(ms)
        with lock:
            latencies.extend(mine)

    with ExitStack() as stack:
        peaks = [stack.enter_context(Peak(pid)) for pid in pids]
        start = time.perf_counter()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
    figure(
        f"append 3-message batch, gunicorn -w {len(pids)} {os.environ.get('BENCH_GUNICORN_ARGS', '')}"
        f"(gunicorn.conf.py), 4 concurrent clients, {len(latencies)} requests: "
        f"p50 {pct(latencies, 0.5):.1f} ms, p99 {pct(latencies, 0.99):.1f} ms, "
        f"{len(latencies) / elapsed:.0f} req/s  (targets: p50 ≤ 15, p99 ≤ 60)"
    )
    figure(
        f"  worker memory: RSS {mb(max(proc_status(pid, 'VmRSS') for pid in pids))} (largest of "
        f"{len(pids)}), peak growth over the {len(latencies):,} appends {mb(max(p.growth for p in peaks))}"
    )

    # 2. flat cost in session length (one client, alternating to share noise)
    http_ = Http(port, raw)
    short, long_ = [], []
    for i in range(300):
        for sid, bucket in (("short", short), ("long", long_)):
            status, _, ms = http_.call("POST", f"sessions/{sid}/messages", batch(i))
            assert status == 200
            bucket.append(ms)
    m_short, m_long = statistics.mean(short), statistics.mean(long_)
    figure(
        f"mean append: {m_short:.2f} ms at 100 prior, {m_long:.2f} ms at 10,000 prior "
        f"→ ratio {m_long / m_short:.2f}x (target ≤ 1.5x)"
    )

    # 3. context for a 1,000-message live window (one client: one worker serves it)
    ctx_times = []
    size = 0
    with ExitStack() as stack:
        peaks = [stack.enter_context(Peak(pid)) for pid in pids]
        for _ in range(60):
            status, payload, ms = http_.call("GET", "sessions/ctx/context?format=anthropic")
            assert status == 200
            size = len(payload)
            ctx_times.append(ms)
    ctx_times = ctx_times[5:]
    figure(
        f"GET context, {ctx.live_message_count} messages / {ctx.conversation_tokens:,} tokens "
        f"({size / 1e6:.2f} MB body): p50 {pct(ctx_times, 0.5):.1f} ms, p99 {pct(ctx_times, 0.99):.1f} ms "
        f"(target p50 ≤ 60); worker peak RSS growth {mb(max(p.growth for p in peaks))}"
    )


if __name__ == "__main__":
    with recording(__file__):
        main()
