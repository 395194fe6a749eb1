"""Compaction benchmarks. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc \\
    REDIS_URL=redis://127.0.0.1:6379/0 python bench/bench_compaction.py

Uses its own database (<name>_compaction_bench, created, migrated, dropped)
and real ``celery worker`` processes. Without REDIS_URL the embedded
filesystem broker is used (it polls its folder about once a second). Text replays
the recorded runs of the workloads folder (``CONTEXTSVC_SHARED``), else synthetic.

1. Offline-summariser compaction of a ~200k-token session, end to end through
   the worker: from the request (enqueue on commit) to the run's row saying
   "succeeded". Target ≤ 1 s.
2. The same compaction with the Anthropic summariser against the local fake
   Messages API answering in 0 ms: the service's own time around the model
   call (run total minus time inside the SDK call). Target ≤ 150 ms.
3. Worker peak RSS (VmHWM) while compacting a session holding 200 MB of tool
   outputs (compaction reads views only). Target ≤ 300 MB.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

from common import (  # bench/ is sys.path[0] when run as a script
    ROOT,
    django_on_scratch_database,
    drop_database,
    figure,
    recording,
)

WORKLOADS = ROOT.parent / "shared" / "workloads" / "real"


# --- conversations ------------------------------------------------------------------------


def trajectories() -> list[list[dict]]:
    runs = []
    for path in sorted(WORKLOADS.glob("*/*.jsonl")):
        msgs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        runs.append([m for m in msgs if m.get("role") in ("user", "assistant", "tool")])
    return runs


def synthetic_run(n: int) -> list[dict]:
    out: list[dict] = [
        {"role": "user", "content": f"Fix the failing job in src/app/job{n}.py; keep the API."}
    ]
    for k in range(8):
        cid = f"c{k}"
        out.append(
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": cid,
                        "name": "bash",
                        "arguments": {"command": f"pytest tests/test_job{n}.py"},
                    }
                ],
            }
        )
        out.append(
            {
                "role": "tool",
                "tool_call_id": cid,
                "name": "bash",
                "content": f"FAILED tests/test_job{n}.py::test_{k} - ValueError: bad\n"
                + "ok line\n" * 200,
            }
        )
    out.append({"role": "assistant", "content": f"The fix is a guard in job{n}.py."})
    return out


def conversation(target_tokens: int):
    """Batches of messages (real trajectories replayed, ids made unique) until ~target tokens."""
    runs = trajectories() or [synthetic_run(i) for i in range(50)]
    approx = 0
    i = 0
    while approx < target_tokens:
        run = runs[i % len(runs)]
        prefix = f"r{i}_"
        batch: list[dict] = []
        open_ids: set[str] = set()
        for m in run:
            msg = {"role": m["role"], "content": m.get("content") or ""}
            if not isinstance(msg["content"], str):
                msg["content"] = json.dumps(msg["content"])
            if m["role"] == "assistant" and m.get("tool_calls"):
                msg["tool_calls"] = [
                    {
                        "id": prefix + c["id"],
                        "name": c["name"],
                        "arguments": c.get("arguments") or {},
                    }
                    for c in m["tool_calls"]
                ]
                open_ids.update(c["id"] for c in msg["tool_calls"])
            if m["role"] == "tool":
                cid = prefix + (m.get("tool_call_id") or "")
                if cid not in open_ids:
                    continue
                open_ids.discard(cid)
                msg["tool_call_id"] = cid
            if m["role"] == "user" and not msg["content"]:
                continue
            batch.append(msg)
            approx += len(msg["content"]) // 4 + 8
            if len(batch) >= 60 and m["role"] != "assistant":
                yield batch
                batch = []
            if approx >= target_tokens and m["role"] == "tool":
                break
        if batch:
            yield batch
        i += 1


# --- workers ----------------------------------------------------------------------------------


class Worker:
    def __init__(self, env: dict[str, str], log: Path, *, pool: str = "solo") -> None:
        self.env, self.log_path, self.pool = env, log, pool
        self.queue = f"compaction-bench-{uuid.uuid4().hex[:6]}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Worker:
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "contextsvc",
            "worker",
            f"--pool={self.pool}",
            "--concurrency=1",
            "--loglevel=WARNING",
            "-Q",
            self.queue,
            "-n",
            f"{self.queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self.env, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT
        )
        # Ready once it consumes: ping it through the broker.
        from contextsvc.celery import app

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"worker died:\n{self.log_path.read_text()}")
            if app.control.ping(destination=[f"{self.queue}@{os.uname().nodename}"], timeout=0.5):
                return self
        sys.exit(f"worker not ready:\n{self.log_path.read_text()}")

    def __exit__(self, *exc) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        redis_url = os.environ.get("REDIS_URL")
        if redis_url:  # the per-run queue and kombu's binding keys
            import redis

            client = redis.Redis.from_url(redis_url)
            keys = [self.queue, *client.scan_iter(match=f"_kombu.binding*{self.queue}")]
            client.delete(*keys)

    def status(self, field: str) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        return 0


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def wait_finished(run_id, timeout: float = 120):
    from compaction.models import CompactionRun

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = CompactionRun.objects.get(pk=run_id)
        if run.is_finished:
            return run, time.perf_counter()
        time.sleep(0.002)
    sys.exit(f"run {run_id} did not finish")


# --- main -------------------------------------------------------------------------------------


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="compaction-bench-"))
    db_url = django_on_scratch_database(
        "_compaction_bench", CONTEXTSVC_VAR_DIR=str(tmp / "var"), LOG_LEVEL="WARNING"
    )
    from django.conf import settings

    try:
        run_benchmarks(db_url, tmp, settings)
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(db_url)


def run_benchmarks(db_url: str, tmp: Path, settings) -> None:
    from compaction.services.requests import compaction_request
    from compaction.services.sync import compaction_run_sync
    from fakes.anthropic_server import FakeAnthropic
    from sessions.models import Message, Session
    from sessions.services.append import session_append_messages
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    broker = settings.CELERY_BROKER_URL
    print(f"broker: {broker.split('@')[-1]}; database: {urlparse(db_url).path.lstrip('/')}")
    if broker.startswith("filesystem"):
        print("  (filesystem broker: the worker polls about once a second; set REDIS_URL)")
    key, _ = agent_key_create(name="bench")
    base_env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "CONTEXTSVC_SUMMARIZER": "offline",
        "ANTHROPIC_API_KEY": "",
    }

    def big_session(sid: str, tokens: int = 235_000) -> Session:
        session = session_create(
            owner=key,
            data={
                "id": sid,
                "model": "claude-sonnet-4-5",
                "context_window": 400_000,
                "max_output_tokens": 16_000,
                "buffer_tokens": 0,
                # Auto-compaction off: the bench triggers each run itself.
                "policy": {"compaction": {"auto": False}},
            },
        )
        for batch in conversation(tokens):
            session_append_messages(session=session, messages=batch)
        return Session.objects.get(pk=session.pk)

    # 1. offline summariser, through the worker ----------------------------------------------------
    print("seeding ~200k-token sessions from the workloads…", flush=True)
    sessions = [big_session(f"s200k-{i}") for i in range(4)]
    s0 = sessions[0]
    print(
        f"  {s0.live_message_count} messages, {s0.conversation_tokens:,} tokens in the live window"
    )
    with Worker(base_env, tmp / "worker-offline.log") as worker:
        settings.CONTEXTSVC_COMPACTION_QUEUE = worker.queue
        walls, queues, totals, cpus, results = [], [], [], [], []
        for s in sessions:
            start = time.perf_counter()
            run, _ = compaction_request(session=s, trigger="manual", reason={"kind": "manual"})
            run, done = wait_finished(run.pk)
            assert run.status == "succeeded", run.error
            walls.append((done - start) * 1000)
            queues.append(run.timings.get("queue_ms") or 0)
            totals.append(run.timings["total_ms"])
            cpus.append(run.timings.get("cpu_ms", 0))
            results.append(run)
        r = sorted(results, key=lambda run: run.timings["total_ms"])[len(results) // 2]
        med = statistics.median
        what = (
            f"{', '.join(r.strategies_run)} → {r.after_tokens:,} tokens, "
            f"{r.before_msg_count} → {r.after_msg_count} messages"
        )
        figure(
            f"1. offline compaction of a {r.before_tokens:,}-token window through the worker"
            f" ({what}): end to end median {med(walls):.0f} ms, max {max(walls):.0f} ms"
            f" (queue {med(queues):.0f} ms, run {med(totals):.0f} ms,"
            f" worker CPU {med(cpus):.0f} ms)"
            "  (target ≤ 1000 ms)"
        )
        t = r.timings
        figure(
            f"   run breakdown: load {t['load_ms']:.0f} ms, strategies+retention"
            f" {t['compute_ms']:.0f} ms (summariser {t['llm_ms']:.0f} ms),"
            f" apply {t['apply_ms']:.0f} ms; retention score {r.retention_score}"
        )

    # 2. fake Messages API at 0 ms: the service's own overhead -------------------------------------
    overheads, llms, cpus2 = [], [], []
    with FakeAnthropic(api_key="bench-key") as fake:
        settings.CONTEXTSVC_SUMMARIZER = "auto"
        settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY = "bench-key"
        settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_BASE_URL = fake.base_url
        cold = 0.0
        for i in range(5):
            s = big_session(f"fake-{i}")
            run, _ = compaction_request(
                session=s, trigger="manual", reason={"kind": "manual"}, enqueue=False
            )
            run = compaction_run_sync(run=run)
            assert run.status == "succeeded" and run.summarizer == "anthropic", run.error
            if i == 0:
                # The first call in a fresh process imports the SDK and builds its
                # client (a worker does both at start: tasks._warm_up).
                cold = run.timings["overhead_ms"]
                continue
            overheads.append(run.timings["overhead_ms"])
            llms.append(run.timings["llm_ms"])
            cpus2.append(run.timings["cpu_ms"])
        sent = fake.messages_requests()[-1].body
        settings.CONTEXTSVC_SUMMARIZER = "offline"
        settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY = None
    med = statistics.median
    figure(
        f"2. with the fake Messages API answering in 0 ms: service overhead around the model call"
        f" median {med(overheads):.0f} ms, max {max(overheads):.0f} ms (the SDK call itself"
        f" {med(llms):.0f} ms, {len(json.dumps(sent)) / 1e6:.1f} MB request; run CPU incl. SDK"
        f" {med(cpus2):.0f} ms)  (target ≤ 150 ms)"
    )
    figure(f"   first call in a fresh process (SDK import + client): {cold:.0f} ms")

    # 3. worker RSS with 200 MB of tool outputs ----------------------------------------------------
    print("storing 200 MB of tool outputs (100 × 2 MB, stored as ToolOutput)…", flush=True)
    heavy = session_create(
        owner=key,
        data={
            "id": "heavy",
            "model": "claude-sonnet-4-5",
            "context_window": 400_000,
            "max_output_tokens": 16_000,
            "buffer_tokens": 0,
            "policy": {"compaction": {"auto": False}},
        },
    )
    line = "2026-11-22T13:00:00Z INFO worker-07 GET /api/items/{i} status=200 took={j}ms\n"
    for n in range(100):
        output = f"output {n}\n" + "".join(
            line.format(i=n * 100_000 + j, j=j % 997) for j in range(26_000)
        )
        cid = f"big{n}"
        session_append_messages(
            session=heavy,
            messages=[
                {"role": "user", "content": f"Run job {n} and report"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": cid, "name": "bash", "arguments": {"command": f"job {n}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": cid, "content": output},
                {"role": "assistant", "content": f"Job {n} ran."},
            ],
        )
    heavy.refresh_from_db()
    from django.db.models import Sum

    stored = heavy.outputs.aggregate(b=Sum("byte_size"))["b"] if hasattr(heavy, "outputs") else None
    stored = stored or Message.objects.filter(session=heavy).aggregate(b=Sum("token_count"))["b"]
    with Worker(base_env, tmp / "worker-rss.log") as worker:
        settings.CONTEXTSVC_COMPACTION_QUEUE = worker.queue
        idle = worker.status("VmRSS")
        run, _ = compaction_request(session=heavy, trigger="manual", reason={"kind": "manual"})
        run, _ = wait_finished(run.pk, timeout=600)
        assert run.status == "succeeded", run.error
        peak = worker.status("VmHWM")
    figure(
        f"3. worker peak RSS compacting a session holding {mb(stored or 0)} of tool outputs: "
        f"{mb(peak)} (idle after start {mb(idle)}; run {run.timings['total_ms']:.0f} ms, "
        f"{', '.join(run.strategies_run)})  (target ≤ 300 MB)"
    )


if __name__ == "__main__":
    with recording(__file__):
        main()
