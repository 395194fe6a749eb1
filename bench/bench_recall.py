"""history_search on PostgreSQL: a long session's recall index, built and searched. Prints figures.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_recall.py

Uses its own database (<name>_recall_bench, dropped and re-created). Seeds,
through the real append path, a session of ``TURNS`` × 5 messages (10,000 by
default) whose ``TURNS`` tool outputs (2,000) run from 1 KB to 1 MB, about
``TOTAL_MB`` (300) in all; each output holds one unique marker, a path that
~1 % of outputs share, and words every output has. Then:

1. the index built from nothing (``recall_catch_up``): time and rate;
2. searches through the tool's handler (what the REST call and the proxy run):
   rare markers, a shared path, a common word, a regex, words in any order;
   p50 / p99 per kind and overall; the SQL statements of each search, on
   this session and on a session a tenth its size (a constant number);
3. the naive way beside it: the same rare markers found by streaming every
   output through grep (``output_grep``) newest first.

``BENCH_RECALL_TURNS`` / ``BENCH_RECALL_MB`` make it smaller for a quick look.
"""

from __future__ import annotations

import os
import random
import statistics
import time

from common import django_on_scratch_database, drop_database, pct

TURNS = int(os.environ.get("BENCH_RECALL_TURNS", "2000"))
TOTAL_MB = int(os.environ.get("BENCH_RECALL_MB", "300"))
SEARCHES_PER_KIND = int(os.environ.get("BENCH_RECALL_SEARCHES", "60"))
WORDS = (
    "alpha beta gamma delta build request handler config parser worker queue cache "
    "session token module import export thread socket buffer stream record"
).split()


def marker(turn: int) -> str:
    return f"MK-{turn:05d}-{(turn * 2654435761) % 16**8:08x}"


def output_text(turn: int, size: int, rng: random.Random) -> str:
    """About ``size`` bytes of log-like lines; the marker somewhere in the middle."""
    lines: list[str] = []
    used = 0
    at = rng.randint(0, max(1, size // 80))
    n = 0
    while used < size:
        words = " ".join(rng.choice(WORDS) for _ in range(8))
        line = f"{n:06d} INFO {words} item={rng.randint(0, 10**6)}"
        if n == at:
            line = f"{n:06d} RESULT {marker(turn)} computed for step {turn}"
        if n % 400 == 7:
            line = f"{n:06d} ERROR timeout while reading src/pkg_{turn % 97}/worker.py"
        lines.append(line)
        used += len(line) + 1
        n += 1
    return "\n".join(lines) + "\n"


def sizes(rng: random.Random) -> list[int]:
    """TURNS output sizes from 1 KB to 1 MB (log-uniform), scaled to TOTAL_MB."""
    raw = [int(1024 * 2 ** rng.uniform(0, 10)) for _ in range(TURNS)]
    scale = TOTAL_MB * 1024 * 1024 / sum(raw)
    return [max(1024, min(1024 * 1024, int(s * scale))) for s in raw]


def seed(session, turns: int, rng: random.Random) -> float:
    from sessions.services.append import session_append_messages

    started = time.perf_counter()
    for turn, size in enumerate(sizes(rng)[:turns], start=1):
        call = {"id": f"call_{turn}", "name": "bash", "arguments": {"command": f"step {turn}"}}
        session_append_messages(
            session=session,
            messages=[
                {"role": "user", "content": f"Continue with step {turn}."},
                {"role": "assistant", "content": f"Running step {turn}.", "tool_calls": [call]},
                {
                    "role": "tool",
                    "tool_call_id": f"call_{turn}",
                    "content": output_text(turn, size, rng),
                },
                {"role": "assistant", "content": f"Step {turn} done; next."},
                {"role": "user", "content": "ok"},
            ],
        )
        if turn % 200 == 0:
            print(f"  seeded {turn} turns ({time.perf_counter() - started:.0f} s)", flush=True)
    return time.perf_counter() - started


def make_session(key, sid: str):
    from sessions.services.sessions import session_create

    return session_create(
        owner=key,
        data={
            "id": sid,
            "model": "claude-sonnet-4-5",
            "context_window": 1_000_000,
            "max_output_tokens": 16_000,
            "buffer_tokens": 0,
            "policy": {"compaction": {"auto": False}},
        },
    )


def run() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from sessions.models import RecallSegment, Session, ToolOutput
    from sessions.outputs.grep import output_grep
    from sessions.recall.index import recall_catch_up
    from sessions.recall.tool import call_search
    from sessions.services.keys import agent_key_create

    rng = random.Random(7)
    key, _ = agent_key_create(name="bench")
    print(f"seeding {TURNS} turns ({TURNS * 5} messages, ~{TOTAL_MB} MB of outputs)…", flush=True)
    big = make_session(key, "recall-big")
    seed_s = seed(big, TURNS, rng)
    small = make_session(key, "recall-small")
    seed(small, max(1, TURNS // 10), random.Random(8))
    stored = sum(ToolOutput.objects.filter(session=big).values_list("byte_size", flat=True))
    print(f"  seeded in {seed_s:.0f} s: {stored / 2**20:.0f} MB in {TURNS} outputs")

    for session in (big, small):
        started = time.perf_counter()
        done = recall_catch_up(session.pk, max_bytes=2**62)
        took = time.perf_counter() - started
        if session is big:
            segments = RecallSegment.objects.filter(session=big).count()
            print(
                f"\n1. index built from nothing: {took:.1f} s, {stored / 2**20 / took:.1f} MB/s, "
                f"{segments:,} segments, through seq {done.indexed_seq}"
            )
    with connection.cursor() as c:
        c.execute("ANALYZE agent_sessions_recallsegment")
        c.execute(
            "SELECT pg_size_pretty(pg_relation_size('recall_text_trgm_idx')), "
            "pg_size_pretty(pg_relation_size('recall_text_fts_idx')), "
            "pg_size_pretty(pg_total_relation_size('agent_sessions_recallsegment'))"
        )
        trgm, fts, total = c.fetchone()
    print(f"   trigram index {trgm}, full-text index {fts}, table with indexes {total}")

    big = Session.objects.get(pk=big.pk)
    small = Session.objects.get(pk=small.pk)
    turns = list(range(1, TURNS + 1))
    kinds = {
        "rare marker": lambda: {"query": marker(rng.choice(turns))},
        "shared path": lambda: {"query": f"src/pkg_{rng.randrange(97)}/worker.py"},
        "common word": lambda: {"query": rng.choice(WORDS) + " " + rng.choice(WORDS)},
        "regex": lambda: {"query": rf"MK-{rng.choice(turns):05d}-[0-9a-f]{{8}}", "regex": True},
        "words, any order": lambda: {"query": f"computed step {rng.choice(turns)} RESULT"},
    }
    print(f"\n2. searches on {big.last_seq:,} messages ({SEARCHES_PER_KIND} per kind):")
    every: list[float] = []
    statements: dict[str, set[int]] = {"big": set(), "small": set()}
    missed = 0
    for kind, make in kinds.items():
        times = []
        for _ in range(SEARCHES_PER_KIND):
            args = make()
            started = time.perf_counter()
            with CaptureQueriesContext(connection) as queries:
                body = call_search(big, args)
            times.append((time.perf_counter() - started) * 1000)
            statements["big"].add(len(queries))
            if kind in ("rare marker", "regex") and not body["hits"]:
                missed += 1
            with CaptureQueriesContext(connection) as queries:
                call_search(small, args)
            statements["small"].add(len(queries))
        every += times
        print(
            f"   {kind:<17} p50 {statistics.median(times):6.1f} ms   p99 {pct(times, 0.99):6.1f} ms"
        )
    print(
        f"   all               p50 {statistics.median(every):6.1f} ms   p99 {pct(every, 0.99):6.1f} ms"
        "   (targets 30 / 150)"
    )
    print(f"   markers not found: {missed}")
    print(
        f"   SQL statements per search: {sorted(statements['big'])} on {big.last_seq:,} messages, "
        f"{sorted(statements['small'])} on {small.last_seq:,}"
    )

    # 3. the naive way: grep every output, newest first, until the marker shows up.
    outputs = list(ToolOutput.objects.filter(session=big).order_by("-id"))
    naive = []
    for _ in range(5):
        wanted = marker(rng.choice(turns))
        started = time.perf_counter()
        for output in outputs:
            if output_grep(output, pattern=wanted, max_matches=1, time_limit=600)["matches"]:
                break
        naive.append((time.perf_counter() - started) * 1000)
    print(
        f"\n3. naive (grep every output newest first) for a rare marker: p50 "
        f"{statistics.median(naive):,.0f} ms; index {statistics.median(every):.1f} ms "
        f"({statistics.median(naive) / statistics.median(every):,.0f}x)"
    )


def main() -> None:
    db_url = django_on_scratch_database(
        "_recall_bench", LOG_LEVEL="WARNING", CONTEXTSVC_AUTO_COMPACT="false"
    )
    try:
        run()
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(db_url)


if __name__ == "__main__":
    main()
