"""Context policy on real trajectories: contextsvc replayed through its API against the peers.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_policy.py
    python bench/bench_policy.py --windows 32000 --only mini-swe-agent   # a subset
    python bench/bench_policy.py --policy '{"compaction": {"target_ratio": 0.5}}'

Every trajectory of ``workloads/real`` in the workloads folder
(``CONTEXTSVC_SHARED``) is replayed as an agent would
drive the service, through the same API handlers (Django's test client, no
socket): before each recorded assistant message (one LLM call) GET
``context?format=openai``; that body is what the call sends. Then POST the
usage of the call, the assistant message, and its tool results. A
compaction the service queues runs to its end before the next call (a worker
that keeps up: ``compaction_execute`` where Celery would run it); a blocked
context compacts inside GET /context as it does in production.

The measures are the shared tools' (imported from ``tools/`` of that folder, not
re-implemented): tokens, cost units (cache reads 0.1, writes 1.25, summary
calls charged from the compaction runs: their input at 1.0, or 0.1 for the part
that is the cached prefix of the call before, output at 5.0), broken pairs,
task retention, next-action recall. The system prompt is left out of tokens
and cost, as the simulator leaves it out for every peer; it is part of the text
recall and retention look in. The peers are simulated by
``peer_policies.simulate`` on the same trajectories; one table per window,
with our cost as a multiple of the cheapest peer with no call over the limit.

Uses its own database (<DATABASE_URL's name>_policy_bench, created, migrated,
dropped) on PostgreSQL, or a temporary SQLite file without DATABASE_URL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import SHARED, WORKLOADS, drop_database, scratch_database
from policy_parts import api_message, load, planner_timing, row, sent_messages

TOOLS = SHARED / "tools"
sys.path.insert(0, str(TOOLS))
import nextaction  # noqa: E402  (tools/ of CONTEXTSVC_SHARED)
import peer_policies as peers  # noqa: E402

WINDOWS = {32_000: 4_000, 16_000: 2_000}  # window: max output (the simulator's pairs)


# --- the replay -----------------------------------------------------------------------------


class Replay:
    """One trajectory through the API; the measures of ``peers.simulate(measure=True)``."""

    def __init__(self, client, key: str, sid: str, window: int, max_out: int, policy: dict):
        self.client, self.sid = client, sid
        self.headers = {"Authorization": f"Bearer {key}"}
        self.limit = window - max_out
        body = {
            "id": sid,
            "model": "claude-sonnet-4-5",
            "context_window": window,
            "max_output_tokens": max_out,
            "buffer_tokens": 0,  # the limit is the simulator's: window - max output
            "policy": policy,
        }
        self.call("post", "sessions", body, expect=201)

    def call(self, method: str, path: str, body: Any = None, expect: int = 200, **query) -> dict:
        fn = getattr(self.client, method)
        url = f"/api/v1/{path}"
        if method == "get":
            r = fn(url, query or None, headers=self.headers)
        else:
            r = fn(
                url, data=json.dumps(body), content_type="application/json", headers=self.headers
            )
        if r.status_code != expect:
            raise RuntimeError(f"{method.upper()} {path}: {r.status_code} {r.content[:500]!r}")
        return r.json()

    def post_messages(self, batch: list[dict]) -> None:
        if batch:
            self.call("post", f"sessions/{self.sid}/messages", {"messages": batch})
            drain()


def drain() -> None:
    """Run the compactions the last request queued, as a worker that keeps up would."""
    from compaction.services.execute import compaction_execute

    while QUEUED:
        compaction_execute(run_id=QUEUED.pop(0))


QUEUED: list[str] = []


SUMMARY_CALLS: list[tuple[list[dict], str]] = []


def record_summary_calls() -> None:
    """Record every summary request (the messages an LLM would read) and its answer."""
    from compaction import summarizers

    inner = summarizers.TimedSummarizer.complete

    def complete(self, request):
        result = inner(self, request)
        msgs = [{"role": "system", "content": request.system}] if request.system else []
        for m in request.llm_messages():
            d: dict[str, Any] = {"role": m.role, "content": m.context_text}
            if m.tool_calls:
                d["tool_calls"] = [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
                ]
            if m.role == "tool":
                d["tool_call_id"] = m.tool_call_id
            msgs.append(d)
        SUMMARY_CALLS.append((msgs, result.text))
        return result

    summarizers.TimedSummarizer.complete = complete


def summary_units(prev: list[str]) -> float:
    """Cost units of the summary calls made since the last look: input at 1.0, the part
    that is a cached prefix of the previous LLM call (``prev``, content keys) at 0.1,
    output at 5.0 (the offline summariser as if a model had read and written)."""
    units = 0.0
    while SUMMARY_CALLS:
        msgs, text = SUMMARY_CALLS.pop(0)
        body = [m for m in msgs if m["role"] != "system"]
        same = 0
        for a, b in zip(prev, (peers.key(x) for x in body), strict=False):
            if a != b:
                break
            same += 1
        cached = sum(map(peers.tok, body[:same]))
        total = sum(map(peers.tok, msgs))
        out = 5.0 * peers.tok({"content": text})
        SUMMARY_SPLIT["input"] += 0.1 * cached + 1.0 * (total - cached)
        SUMMARY_SPLIT["output"] += out
        SUMMARY_SPLIT["calls"] += 1
        units += 0.1 * cached + 1.0 * (total - cached) + out
    return units


SUMMARY_SPLIT = {"input": 0.0, "output": 0.0, "calls": 0}


def replay(client, key: str, path: Path, window: int, policy: dict) -> dict:
    msgs = load(path)
    sid = f"{path.stem[:60]}-{window}-{time.monotonic_ns()}"
    r = Replay(client, key, sid, window, WINDOWS[window], policy)
    system = "\n".join(m.get("content") or "" for m in msgs if m["role"] == "system")
    if system:
        r.call(
            "put",
            f"sessions/{sid}/system",
            [{"name": "base", "kind": "base", "content": system}],
        )
    task = next((m.get("content") or "" for m in msgs if m["role"] == "user"), "")
    tracker = nextaction.RecallTracker()
    answered: set[str] = set()
    pending: list[dict] = []
    prev: list[str] = []
    out = {
        "calls": 0,
        "overflows": 0,
        "sent": 0,
        "cost": 0.0,
        "summary_cost": 0.0,
        "read": 0.0,
        "new": 0.0,
        "rewrite": 0.0,
        "busts": 0,
        "pair_errors": 0,
        "final": 0,
    }
    last_text = system
    for m in msgs:
        if m["role"] == "system":
            tracker.add(m)
            continue
        if m["role"] == "assistant":
            r.post_messages(pending)
            pending = []
            body = r.call("get", f"sessions/{sid}/context", format="openai")
            out["summary_cost"] += summary_units(prev)
            if body["budget"]["guard"]["status"] == "final":
                out["final"] += 1
            view, sys_text = sent_messages(body)
            n = sum(map(peers.tok, view))
            out["calls"] += 1
            out["sent"] += n
            out["overflows"] += n > r.limit
            cur = [peers.key(x) for x in view]
            same = 0
            for a, b in zip(prev, cur, strict=False):
                if a != b:
                    break
                same += 1
            read = sum(map(peers.tok, view[:same]))
            out["cost"] += 0.1 * read + 1.25 * (n - read)
            counts: dict[str, int] = {}
            for k in prev:
                counts[k] = counts.get(k, 0) + 1
            rw = 0
            for x, k in zip(view[same:], cur[same:], strict=True):
                if counts.get(k, 0) > 0:
                    counts[k] -= 1
                    rw += peers.tok(x)
            out["read"] += read
            out["rewrite"] += rw
            out["new"] += n - read - rw
            if same < len(prev):
                out["busts"] += 1
            out["pair_errors"] += peers.broken_pairs(view, answered)
            last_text = (
                (sys_text or system) + "\n" + "\n".join(nextaction.message_text(x) for x in view)
            )
            tracker.score(m, last_text)
            prev = cur
            sys_tokens = peers.tok({"content": sys_text or system})
            usage = {
                "input_tokens": 0,
                "output_tokens": peers.tok(m),
                "cache_read_input_tokens": read + (sys_tokens if out["calls"] > 1 else 0),
                "cache_creation_input_tokens": n - read + (0 if out["calls"] > 1 else sys_tokens),
            }
            # The usage first: it describes the context just sent (a compaction the
            # answer triggers must not run between the call and its report).
            r.call("post", f"sessions/{sid}/usage", usage)
            r.post_messages([api_message(m)])
        else:
            pending.append(api_message(m))
        tracker.add(m)
        if m["role"] == "tool":
            answered.add(m.get("tool_call_id"))
    out["summary_cost"] += summary_units(prev)
    out["cost"] += out["summary_cost"]
    out.update(tracker.result())
    out["retention"] = nextaction.task_retention(task, last_text)
    return out


# --- set-up and the table -------------------------------------------------------------------


def setup_django() -> str | None:
    """Django on a scratch database (PostgreSQL) or a temporary SQLite file; the URL to drop."""
    for name, value in (
        ("CONTEXTSVC_RATE_LIMIT", "1000000/second"),
        ("CONTEXTSVC_RATE_LIMIT_MB", "1000000/second"),
        ("CONTEXTSVC_RATE_PACE", "1000000/second"),
        ("CONTEXTSVC_MAX_CONCURRENT_PER_KEY", "0"),
        ("CONTEXTSVC_MAX_HEAVY_PER_KEY", "0"),
        ("CONTEXTSVC_KEEP_THREAD_FREE", "false"),
        ("CONTEXTSVC_SUMMARIZER", "offline"),
        ("LOG_LEVEL", "ERROR"),
    ):
        os.environ.setdefault(name, value)
    drop = None
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        drop = os.environ["DATABASE_URL"] = scratch_database(f"_policy_bench_{os.getpid()}")
    else:
        folder = tempfile.mkdtemp(prefix="bench_policy_")
        os.environ["DATABASE_URL"] = f"sqlite:///{folder}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextsvc.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import compaction.services.requests as requests

    # The bench is the worker: queued runs are executed by ``drain``.
    requests.enqueue_run = lambda run_id, task_id=None: QUEUED.append(str(run_id))
    record_summary_calls()
    return drop


def peer_rows(files: list[Path], limit: int) -> list[tuple[str, dict]]:
    trajs = [load(f) for f in files]
    return [
        (P.name, peers.aggregate([peers.simulate(P(limit), msgs, measure=True) for msgs in trajs]))
        for P in peers.POLICIES
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", default="32000,16000")
    parser.add_argument("--only", default="", help="replay only files whose path contains this")
    parser.add_argument("--policy", default="{}", help="the session policy (JSON)")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--per-run", action="store_true", help="print each trajectory's figures")
    args = parser.parse_args()
    files = sorted(p for p in WORKLOADS.glob("*/*.jsonl") if args.only in str(p))
    policy = json.loads(args.policy)
    drop = setup_django()
    from django.test import Client

    from sessions.services.keys import agent_key_create

    _, key = agent_key_create(name="bench-policy")
    client = Client()
    try:
        for window in (int(w) for w in args.windows.split(",")):
            limit = window - WINDOWS[window]
            started = time.perf_counter()
            runs, errors = [], []
            for f in files:
                try:
                    res = replay(client, key, f, window, policy)
                except RuntimeError as exc:
                    # A refused request ends that replay; the others still run and
                    # the table says how many did not finish (their figures are left out).
                    errors.append(f"{f.parent.name}/{f.name}: {exc}")
                    continue
                runs.append(res)
                if args.per_run:
                    print(
                        f"  {f.parent.name}/{f.name[:50]}: calls {res['calls']} cost "
                        f"{res['cost']:,.0f} summary {res['summary_cost']:,.0f} over "
                        f"{res['overflows']} final {res['final']} retention "
                        f"{res['retention']:.2f} recall {res['na_hits']}/{res['na_total']}",
                        flush=True,
                    )
            elapsed = time.perf_counter() - started
            ours = peers.aggregate(runs)
            ours["final"] = sum(r["final"] for r in runs)
            rows = [] if args.no_peers else peer_rows(files, limit)
            free = [a for _, a in rows if a["overflows"] == 0]
            ref = min((a["cost"] for a in free), default=None)
            print(
                f"\nwindow {window:,}, max output {WINDOWS[window]:,}, limit {limit:,}; "
                f"{len(files)} trajectories, {ours['calls']} LLM calls; replay {elapsed:.0f} s"
            )
            print(
                "| policy | LLM calls | calls over limit | broken pairs | input tokens sent | "
                "cost units (× cheapest overflow-free peer) | task retention | "
                "next-action recall |"
            )
            print("|---|---|---|---|---|---|---|---|")
            for name, a in rows:
                print(row(name, a, ref))
            print(row("**contextsvc (replayed through the API)**", ours, ref))
            print(
                f"contextsvc: summary calls {ours['summary_cost']:,.0f} units, cache reads "
                f"{ours['read']:,.0f}, re-writes after a prefix change {ours['rewrite']:,.0f}, "
                f"new {ours['new']:,.0f} tokens; prefix changes {ours['busts']}; "
                f"calls answered 'final' {ours['final']}; summary calls {SUMMARY_SPLIT['calls']}: "
                f"input {SUMMARY_SPLIT['input']:,.0f}, output {SUMMARY_SPLIT['output']:,.0f} units",
                flush=True,
            )
            print(f"replay errors: {len(errors)}", *(f"  {e}" for e in errors), sep="\n")
            SUMMARY_SPLIT.update(input=0.0, output=0.0, calls=0)
        planner_timing()
    finally:
        if drop:
            from django.db import connections

            connections.close_all()
            drop_database(drop)


if __name__ == "__main__":
    main()
