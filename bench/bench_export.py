"""Transcript export benchmark. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_export.py

Uses its own database (<name>_export_bench, created and migrated here) and a
real gunicorn with ONE worker (the project's gunicorn.conf.py otherwise), so
the web process's memory can be read from /proc (peak RSS is reset through
/proc/<pid>/clear_refs before each export).

Two sessions shaped like an agent loop (a user message, then assistant tool
calls with their results, an answer), their texts taken in turn from the
recorded trajectories of the workloads folder (``CONTEXTSVC_SHARED``): 1,000
and 10,000 messages; the longer one compacted (the window moved past most of
it) and its last turn retracted, so every state is in it.

1. GET /sessions/{sid}/export over HTTP: MB/s (target ≥ 20) for both, and
   the worker's peak RSS growth while it streams (flat memory: going from
   1,000 to 10,000 messages adds at most 10 % of the added body; a buffered
   export would add all of it); medians of BENCH_EXPORT_RUNS (5) runs after
   a warm-up of each.
2. The same with format=anthropic and format=openai (native messages).
3. Paging GET /sessions/{sid}/messages?limit=1000 over the whole 10,000.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import time

from common import (  # bench/ is sys.path[0] when run as a script
    WORKLOADS,
    Peak,
    django_on_scratch_database,
    drop_database,
    figure,
    gunicorn,
    mb,
    recording,
    worker_pid,
)

RUNS = int(os.environ.get("BENCH_EXPORT_RUNS", "5"))
BATCH = 200


def workload_texts() -> dict[str, list[str]]:
    """Texts of the recorded trajectories by role (synthetic when there are none)."""
    texts: dict[str, list[str]] = {"user": [], "assistant": [], "tool": []}
    for path in sorted(WORKLOADS.glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            content = row.get("content")
            if isinstance(content, str) and content.strip() and row.get("role") in texts:
                texts[row["role"]].append(content)
    fallback = "def handler(event):\n    return process(event['body'])\n" * 8
    return {role: found or [fallback] for role, found in texts.items()}


def agent_loop(n: int, texts: dict[str, list[str]]) -> list[dict]:
    """``n`` messages: a user message, four tool calls with their results, an answer."""
    out: list[dict] = []
    i = 0
    while len(out) < n:
        out.append({"role": "user", "content": texts["user"][i % len(texts["user"])]})
        for k in range(4):
            call = f"call_{i}_{k}"
            arguments = {"command": f"grep -n handler src/module_{k}.py", "n": i}
            said = texts["assistant"][(i * 5 + k) % len(texts["assistant"])]
            out.append(
                {
                    "role": "assistant",
                    "content": said,
                    "tool_calls": [{"id": call, "name": "bash", "arguments": arguments}],
                }
            )
            result = texts["tool"][(i * 4 + k) % len(texts["tool"])]
            out.append({"role": "tool", "tool_call_id": call, "content": result})
        out.append(
            {"role": "assistant", "content": texts["assistant"][i % len(texts["assistant"])]}
        )
        i += 1
    while out[n - 1]["role"] == "assistant" and out[n - 1].get("tool_calls"):
        n -= 1  # never end on an unanswered call
    return out[:n]


def seed(key, sid: str, n: int, texts: dict[str, list[str]]):
    from sessions.models import Session
    from sessions.services.append import session_append_messages
    from sessions.services.sessions import session_create

    session = session_create(
        owner=key,
        data={
            "id": sid,
            "model": "claude-sonnet-4-5",
            # Large enough that the guard never ends the session while it is seeded.
            "context_window": 50_000_000,
            "max_output_tokens": 8_000,
        },
    )
    messages = agent_loop(n, texts)
    for start in range(0, len(messages), BATCH):
        session_append_messages(session=session, messages=messages[start : start + BATCH])
        session.refresh_from_db()
    return Session.objects.get(pk=session.pk)


def stream(port: int, key: str, path: str) -> tuple[int, float]:
    """GET ``path`` and read the body as it comes, 64 KiB at a time; → (bytes, seconds)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    conn.request("GET", f"/api/v1/{path}", headers={"Authorization": f"Bearer {key}"})
    response = conn.getresponse()
    assert response.status == 200, (response.status, response.read()[:300])
    size = 0
    while chunk := response.read(65536):
        size += len(chunk)
    seconds = time.perf_counter() - start
    conn.close()
    return size, seconds


def measure(port: int, pid: int, key: str, path: str) -> tuple[int, float, int]:
    """RUNS downloads of ``path``; → (bytes, median MB/s, median peak RSS growth).

    Medians: on a shared machine one run's allocator or scheduler hiccup is noise."""
    rates, growths, size = [], [], 0
    for _ in range(RUNS):
        with Peak(pid) as peak:
            size, seconds = stream(port, key, path)
        rates.append(size / seconds / 1e6)
        growths.append(peak.growth)
    return size, statistics.median(rates), int(statistics.median(growths))


def main() -> None:
    db_url = django_on_scratch_database("_export_bench")
    from sessions.models import Message, Session
    from sessions.services.keys import agent_key_create
    from sessions.services.retract import session_retract_messages

    texts = workload_texts()
    key, raw = agent_key_create(name="bench")
    print("seeding 1,000 and 10,000 messages…", flush=True)
    sizes = {1_000: seed(key, "t1k", 1_000, texts), 10_000: seed(key, "t10k", 10_000, texts)}
    long_ = sizes[10_000]
    session_retract_messages(session=long_, last=None, from_seq=long_.last_seq - 4)
    # What compactions leave: the live window is the last 500 messages.
    Session.objects.filter(pk=long_.pk).update(window_start_seq=long_.last_seq - 500)
    stored = sum(
        len(c or "")
        for c in Message.objects.filter(session=long_).values_list("content", flat=True)
    )
    figure(
        f"sessions: {sizes[1_000].last_seq:,} and {long_.last_seq:,} messages, the longer "
        f"holding {mb(stored)} of message text (an output too big for its message is stored "
        f"apart: the export carries its cut view and ref)"
    )

    with gunicorn(db_url, workers=1, timeout=600) as (port, server):
        pid = worker_pid(server.pid)
        for warm in ("t1k", "t10k"):  # warm up: imports, connections, the allocator's arenas
            stream(port, raw, f"sessions/{warm}/export")
        growth: dict[int, int] = {}
        body: dict[int, int] = {}
        for n, session in sizes.items():
            body[n], rate, growth[n] = measure(
                port, pid, raw, f"sessions/{session.external_id}/export"
            )
            verdict = "met" if rate >= 20 else "MISSED"
            figure(
                f"export {n:,} messages (JSONL, {mb(body[n])}): {rate:.1f} MB/s median of {RUNS} "
                f"(target ≥ 20: {verdict}); worker peak RSS growth {mb(growth[n])} (median)"
            )
        # Flat: the worker holds a chunk, not the body. A buffered export would grow by
        # the body at least, so the growth per byte of body would be ≥ 100 %.
        extra = (growth[10_000] - growth[1_000]) / max(body[10_000] - body[1_000], 1) * 100
        verdict = "met" if extra <= 10 else "MISSED"
        figure(
            f"export memory, 10,000 vs 1,000 messages: peak RSS growth {mb(growth[10_000])} vs "
            f"{mb(growth[1_000])} for bodies of {mb(body[10_000])} vs {mb(body[1_000])}: "
            f"{extra:.0f} % of the added body (target ≤ 10 %, flat: {verdict})"
        )
        for fmt in ("anthropic", "openai"):
            size, rate, peak = measure(port, pid, raw, f"sessions/t10k/export?format={fmt}")
            figure(
                f"export 10,000 messages format={fmt} ({mb(size)}): {rate:.1f} MB/s; "
                f"worker peak RSS growth {mb(peak)}"
            )
        total, seconds, pages, cursor = 0, 0.0, 0, ""
        while True:
            path = "sessions/t10k/messages?limit=1000" + (f"&cursor={cursor}" if cursor else "")
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            start = time.perf_counter()
            conn.request("GET", f"/api/v1/{path}", headers={"Authorization": f"Bearer {raw}"})
            body = conn.getresponse().read()
            seconds += time.perf_counter() - start
            conn.close()
            total, pages = total + len(body), pages + 1
            cursor = json.loads(body)["next_cursor"]
            if cursor is None:
                break
        figure(
            f"page GET /messages?limit=1000 through 10,000 messages: {pages} pages, "
            f"{mb(total)} in {seconds * 1000:.0f} ms ({total / seconds / 1e6:.1f} MB/s, "
            f"{seconds / pages * 1000:.0f} ms a page)"
        )
    drop_database(db_url)


if __name__ == "__main__":
    with recording(__file__):
        main()
