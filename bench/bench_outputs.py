"""Tool output cache benchmarks. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_outputs.py

Uses its own database (<name>_outputs_bench, dropped and re-created here) and
a real gunicorn with ONE worker, so the web process's memory can be read from
/proc (peak RSS is reset through /proc/<pid>/clear_refs before each phase).

1. Raw upload of a 200 MB, ~2 M-line output (streamed from a generator).
2. 100-line slices of it: p50 over random offsets; first vs last slice.
3. Grep over it (a rare regex), and the worker's peak RSS growth in 1-3.
4. Posting a 10 MB tool result (JSON) end to end.
5. A 2 KB tool result vs a plain 2 KB message (and vs the cache turned off).
6. Replay of recorded trajectories (``workloads/real`` under ``CONTEXTSVC_SHARED``, 300 tool calls):
   turns whose already-sent prefix changed because of trimming, with and
   without hysteresis.
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics
import time
from collections.abc import Iterator
from urllib.parse import quote

from common import (  # bench/ is sys.path[0] when run as a script
    ROOT,
    Http,
    Peak,
    django_on_scratch_database,
    drop_database,
    figure,
    gunicorn,
    mb,
    pct,
    recording,
    worker_pid,
)

from fakes.flood_agent import Client

WORKLOADS = ROOT.parent / "shared" / "workloads" / "real"

BIG_LINES = 2_000_000
LINE_WIDTH = 100  # bytes per line, newline included → 200 MB


def log_line(i: int) -> bytes:
    """A ~100-byte log line (padded to exactly LINE_WIDTH)."""
    status = 503 if i % 250_000 == 123 else 200
    stamp = f"2026-11-22T13:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}Z"
    head = f"{i:08d} {stamp} INFO worker-{i % 16:02d} "
    body = f"GET /api/items/{i * 7919 % 1_000_003} status={status} took={i % 997}ms"
    line = (head + body).ljust(LINE_WIDTH - 1)[: LINE_WIDTH - 1] + "\n"
    return line.encode()


def big_output(lines: int = BIG_LINES, piece: int = 10_000) -> Iterator[bytes]:
    for start in range(0, lines, piece):
        yield b"".join(log_line(i) for i in range(start, min(lines, start + piece)))


# --- main --------------------------------------------------------------------------------


def main() -> None:
    started = time.perf_counter()
    db_url = django_on_scratch_database("_outputs_bench")
    from sessions.services.keys import agent_key_create

    _, raw = agent_key_create(name="bench-outputs")
    with gunicorn(db_url, workers=1, timeout=300) as (port, server):
        pid = worker_pid(server.pid)
        run_http(Http(port, raw), pid)
    replay_all()
    from django.db import connections

    connections.close_all()
    drop_database(db_url)
    print(f"total bench time {time.perf_counter() - started:.0f} s")


def run_http(http_: Http, pid: int) -> None:
    status, payload, _ = http_.call(
        "POST", "sessions", {"model": "claude-sonnet-4-5", "id": "big", "context_window": 200_000}
    )
    assert status == 201, payload
    http_.call("GET", "sessions/big/budget")  # warm the worker (tokenizer, connection)

    # 1. upload 200 MB, streamed from a generator (the client never holds it whole)
    size = BIG_LINES * LINE_WIDTH
    with Peak(pid) as upload_peak:
        status, payload, ms = http_.call(
            "PUT",
            "sessions/big/outputs",
            raw=big_output(),
            headers={
                "X-Tool-Name": "dump_logs",
                "Content-Length": str(size),
                "Content-Type": "application/octet-stream",
            },
        )
    assert status == 201, payload
    up = json.loads(payload)
    ref = up["id"]
    figure(
        f"upload {mb(up['byte_size'])}, {up['line_count']:,} lines: {ms / 1000:.1f} s "
        f"({up['byte_size'] / ms / 1000:.0f} MB/s); worker peak RSS growth {mb(upload_peak.growth)}"
    )

    # 2. 100-line slices
    rng = random.Random(1)
    times = []
    with Peak(pid) as slice_peak:
        for _ in range(300):
            offset = rng.randint(1, BIG_LINES - 99)
            status, payload, ms = http_.call("GET", f"refs/{ref}?offset={offset}&limit=100")
            assert status == 200 and json.loads(payload)["lines"] == 100
            times.append(ms)
    first, last = [], []
    for _ in range(40):
        first.append(http_.call("GET", f"refs/{ref}?offset=1&limit=100")[2])
        last.append(http_.call("GET", f"refs/{ref}?offset={BIG_LINES - 99}&limit=100")[2])
    figure(
        f"100-line slice over HTTP, 300 random offsets: p50 {pct(times, 0.5):.1f} ms, "
        f"p99 {pct(times, 0.99):.1f} ms (target p50 ≤ 30); "
        f"first slice p50 {pct(first, 0.5):.1f} ms, last slice p50 {pct(last, 0.5):.1f} ms "
        f"→ last/first {pct(last, 0.5) / pct(first, 0.5):.2f}x "
        f"(target ≤ 2x); worker peak RSS growth {mb(slice_peak.growth)}"
    )

    # 3. grep
    pattern = quote(r"status=5\d\d")
    grep_times = []
    with Peak(pid) as grep_peak:
        for _ in range(3):
            status, payload, ms = http_.call("GET", f"refs/{ref}/grep?pattern={pattern}&context=1")
            assert status == 200, payload
            grep_times.append(ms)
    found = json.loads(payload)
    figure(
        f"grep 'status=5\\d\\d' over {mb(size)}: "
        f"{statistics.median(grep_times) / 1000:.2f} s median of 3 "
        f"({found['match_count']} matches, lines {[m['line'] for m in found['matches']]}) "
        f"(target ≤ 3 s); worker peak RSS growth {mb(grep_peak.growth)} (target ≤ 100 MB)"
    )
    # A pattern that backtracks exponentially on a line of x's: stopped by the time limit.
    status, payload, _ = http_.call(
        "PUT",
        "sessions/big/outputs",
        raw=b"x" * 50_000 + b"\n",
        headers={"Content-Type": "application/octet-stream"},
    )
    xs = json.loads(payload)["id"]
    status, payload, ms = http_.call("GET", f"refs/{xs}/grep?pattern={quote('(x+x+)+y')}")
    figure(
        f"catastrophic pattern (x+x+)+y on a 50,000-x line: HTTP {status} "
        f"({json.loads(payload)['error']['details'].get('reason')}) after {ms / 1000:.1f} s "
        f"(CONTEXTSVC_GREP_TIME_LIMIT_MS)"
    )

    # 4. a 10 MB tool result, end to end: over the API's JSON cap, so uploaded
    # raw and referenced (the JSON body is refused 413 from its headers).
    ten_times, refused = [], []
    with Peak(pid) as post_peak:
        for n in range(3):
            text = b"".join(log_line(i) for i in range(n * 100_000, (n + 1) * 100_000))
            call = {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": f"t{n}", "name": "cat"}],
            }
            result = {"role": "tool", "tool_call_id": f"t{n}", "content": text.decode()}
            # Its own connection: the server closes it unread, maybe before the
            # client has sent it all (status 0 then).
            json_body = json.dumps({"messages": [call, result]}).encode()
            status, _, _, ms = Client(http_.conn.port, http_.key).post(
                "sessions/big/messages", json_body
            )
            assert status in (0, 413), status
            refused.append(ms)
            status, payload, up_ms = http_.call(
                "PUT",
                "sessions/big/outputs",
                raw=text,
                headers={"Content-Type": "application/octet-stream", "X-Tool-Name": "cat"},
            )
            assert status == 201, payload[:300]
            del result["content"]
            result["output_ref"] = json.loads(payload)["id"]
            status, payload, ms = http_.call(
                "POST", "sessions/big/messages", {"messages": [call, result]}
            )
            assert status == 200, payload[:300]
            ten_times.append(up_ms + ms)
    figure(
        f"a 10 MB tool result: (streamed upload + append with its output_ref, stored + "
        f"50 KiB view tokenized): {statistics.median(ten_times):.0f} ms median of 3 "
        f"(target ≤ 1000); the same as a JSON body refused in "
        f"{statistics.median(refused):.0f} ms; worker peak RSS growth {mb(post_peak.growth)}"
    )

    # 5. a 2 KB tool result vs a plain message
    for sid, policy in (("small-on", {}), ("small-off", {"tool_output_cache": {"enabled": False}})):
        http_.call(
            "POST",
            "sessions",
            {
                "model": "claude-sonnet-4-5",
                "id": sid,
                "policy": policy,
                "context_window": 1_000_000,
                "max_output_tokens": 8_000,
            },
        )
    base = "".join(f"src/module_{i}.py: ok\n" for i in range(100))[:2000]
    plain, tool_on, tool_off = [], [], []
    for i in range(400):
        text = f"{i:06d} " + base
        call = {"role": "assistant", "content": "", "tool_calls": [{"id": f"s{i}", "name": "ls"}]}
        for sid, bucket, msgs in (
            (
                "small-on",
                tool_on,
                [call, {"role": "tool", "tool_call_id": f"s{i}", "content": text}],
            ),
            (
                "small-off",
                tool_off,
                [call, {"role": "tool", "tool_call_id": f"s{i}", "content": text}],
            ),
            (
                "small-on",
                plain,
                [{"role": "assistant", "content": "thinking"}, {"role": "user", "content": text}],
            ),
        ):
            status, payload, ms = http_.call("POST", f"sessions/{sid}/messages", {"messages": msgs})
            assert status == 200, payload
            if i >= 50:
                bucket.append(ms)
    figure(
        f"2 KB result (assistant call + tool result): cache on p50 {pct(tool_on, 0.5):.2f} ms / "
        f"mean {statistics.mean(tool_on):.2f}; cache off p50 {pct(tool_off, 0.5):.2f} ms; "
        f"plain 2 KB message pair p50 {pct(plain, 0.5):.2f} ms → overhead over plain "
        f"{pct(tool_on, 0.5) - pct(plain, 0.5):+.2f} ms p50 (target ≤ 2 ms)"
    )


# --- 6. replay -----------------------------------------------------------------------------


def trajectories(tool_calls: int = 300) -> list[list[dict]]:
    """Recorded runs, concatenated until ``tool_calls`` tool results; ids made unique."""
    runs: list[list[dict]] = []
    count = 0
    for n, path in enumerate(sorted(WORKLOADS.glob("*/*.jsonl"))):
        run = []
        for line in path.read_text().splitlines():
            msg = json.loads(line)
            if msg["role"] == "system":
                continue
            out = {"role": msg["role"], "content": msg.get("content") or ""}
            if msg.get("tool_calls"):
                out["tool_calls"] = [
                    {
                        "id": f"r{n}-{c['id']}",
                        "name": c["name"],
                        "arguments": c.get("arguments") or {},
                    }
                    for c in msg["tool_calls"]
                ]
            if msg["role"] == "tool":
                out["tool_call_id"] = f"r{n}-{msg['tool_call_id']}"
                count += 1
            run.append(out)
            if count >= tool_calls:
                break
        runs.append(run)
        if count >= tool_calls:
            break
    return runs


def replay(runs: list[list[dict]], sid: str, hysteresis: float, budget: int) -> dict:
    """Post the runs turn by turn; before each LLM call build the context and compare
    it with the previous call's: did the already-sent prefix change?"""
    from prompting.context.service import context_for_call
    from sessions.models import AgentKey, Session
    from sessions.services.append import session_append_messages
    from sessions.services.sessions import session_create

    owner = AgentKey.objects.get(name="bench-outputs")
    session = session_create(
        owner=owner,
        data={
            "model": "claude-sonnet-4-5",
            "id": sid,
            "context_window": 1_000_000,
            "max_output_tokens": 8_000,
            "policy": {
                "tool_output_cache": {
                    "context_budget_tokens": budget,
                    "trim_hysteresis": hysteresis,
                }
            },
        },
    )
    sent: list[str] = []
    sent_tokens: list[int] = []
    turns = changed = trims = 0
    lost_tokens = 0
    pending: list[dict] = []

    def flush() -> None:
        nonlocal trims
        if pending:
            body = session_append_messages(
                session=Session.objects.get(pk=session.pk), messages=list(pending)
            )
            trims += bool(body["trimmed_seqs"])
            pending.clear()

    for run in runs:
        for msg in run:
            if msg["role"] == "assistant":
                flush()
                # The LLM call: what is sent now vs what was sent last time.
                ctx = context_for_call(
                    session=Session.objects.get(pk=session.pk), fmt="raw", preflight=False
                )
                now = [
                    hashlib.sha1(json.dumps(m, sort_keys=True).encode()).hexdigest()
                    for m in ctx["messages"]
                ]
                tokens = [m.get("token_count", 0) for m in ctx["messages"]]
                turns += 1
                if now[: len(sent)] != sent:
                    changed += 1
                    first = next(
                        i for i, (a, b) in enumerate(zip(sent, now, strict=False)) if a != b
                    )
                    lost_tokens += sum(sent_tokens[first:])
                sent, sent_tokens = now, tokens
            pending.append(msg)
    flush()
    final = Session.objects.get(pk=session.pk)
    return {
        "turns": turns,
        "changed": changed,
        "trims": trims,
        "lost": lost_tokens,
        "tool_tokens": final.tool_output_tokens,
    }


def replay_all() -> None:
    runs = trajectories()
    calls = sum(1 for run in runs for m in run if m["role"] == "tool")
    budget = 20_000
    figure(
        f"replay: {len(runs)} recorded runs, {calls} tool results, "
        f"tool-output budget {budget:,} tokens"
    )
    for h in (0.25, 0.0):
        start = time.perf_counter()
        r = replay(runs, f"replay-{h}", h, budget)
        figure(
            f"  hysteresis {h:.2f}: {r['changed']} of {r['turns']} LLM calls had their "
            f"already-sent "
            f"prefix changed by trimming ({r['trims']} trims; ~{r['lost']:,} already-sent tokens "
            f"re-sent uncached); {time.perf_counter() - start:.1f} s"
        )


if __name__ == "__main__":
    with recording(__file__):
        main()
