"""Dashboard benchmark. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_dashboard.py

Uses its own database (<name>_dashbench, created and migrated here). Seeds an
inspector's worst case: one session of 10,000 messages with 300 tool outputs
(text and outputs from the recorded trajectories of the workloads folder,
CONTEXTSVC_SHARED, when present), never compacted, so the whole transcript is the live window; plus
500 other sessions for the list. Then times each page and htmx partial as the
server sees it (Django's test client in-process: view + templates + queries,
no network), median and p95 of 15 runs after a warm-up; beside the wall time,
this process's CPU time (on a busy machine the figure to read), the time in
the database driver's ``execute`` (PostgreSQL's share and the round trips),
the number of SQL queries, and each figure's ratio to its target. Targets:
first page ≤ 150 ms, each htmx partial ≤ 50 ms (the context tab of the
1M-token window included).

Then (``dashboard_calls``) 10,000 ContextCall records on the same
session: the inspector, the calls card, "what was sent", cost per day, the
query count against a 10-message session, and what writing a record adds to
a context GET (≤ 1 ms).
"""

from __future__ import annotations

import json
import os
import time

import dashboard_calls  # bench/ is sys.path[0] when run as a script
import dashboard_find
from common import ROOT, django_on_scratch_database, figure, record, recording
from page_timing import timed

WORKLOADS = ROOT.parent / "shared" / "workloads" / "real"
MESSAGES = 10_000
TOOL_OUTPUTS = 300


def workload_texts() -> tuple[list[str], list[str]]:
    """(conversation texts, tool outputs) from the recorded runs."""
    texts, outputs = [], []
    for path in sorted(WORKLOADS.glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            msg = json.loads(line)
            content = msg.get("content")
            if not isinstance(content, str) or not content:
                continue
            if msg.get("role") == "tool":
                if len(content) >= 500:
                    outputs.append(content)
            elif msg.get("role") in ("user", "assistant") and 50 <= len(content) <= 3000:
                texts.append(content)
    if not texts:
        texts = ["Let me look at the handler and run the tests again. " * 6]
    if not outputs:
        outputs = ["\n".join(f"src/module_{i}.py:{i}: ok" for i in range(2000))]
    return texts, outputs


def seed(owner, texts: list[str], outputs: list[str]):
    from sessions.models import Session
    from sessions.services.append import session_append_messages
    from sessions.services.sessions import session_create
    from sessions.services.usage import session_record_usage

    session = session_create(
        owner=owner,
        data={
            "id": "big",
            "agent": "bench",
            "model": "claude-sonnet-4-5",
            "context_window": 1_000_000,
            "max_output_tokens": 32_000,
            "buffer_tokens": 8_192,
        },
    )
    # 300 call/result pairs spread over the transcript; text messages between.
    every = (MESSAGES - 2 * TOOL_OUTPUTS) // TOOL_OUTPUTS
    batch: list[dict] = []
    n = calls = t = 0
    while n < MESSAGES:
        if calls < TOOL_OUTPUTS and n % (every + 2) == every and n + 2 <= MESSAGES:
            call_id = f"call_{calls}"
            batch.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "name": "bash",
                            "arguments": {"command": f"run step {calls}"},
                        }
                    ],
                }
            )
            batch.append(
                {"role": "tool", "tool_call_id": call_id, "content": outputs[calls % len(outputs)]}
            )
            calls += 1
            n += 2
        else:
            # a user turn every 8 text messages, as an agent loop posts them
            role = "user" if t % 8 == 0 else "assistant"
            batch.append({"role": role, "content": texts[t % len(texts)]})
            t += 1
            n += 1
        if len(batch) >= 200 and batch[-1]["role"] != "assistant" or len(batch) >= 400:
            session_append_messages(session=session, messages=batch)
            batch = []
            session.refresh_from_db()
            session_record_usage(
                session=session,
                usage={
                    "input_tokens": session.used_tokens,
                    "output_tokens": 200,
                    "cache_read_tokens": session.used_tokens // 2,
                    "cache_creation_tokens": 1_000,
                },
            )
    if batch:
        session_append_messages(session=session, messages=batch)
    return Session.objects.get(pk=session.pk)


HEADER = (
    f"\n{'':11}{'page / partial':48}{'wall':>7}{'p95':>7}{'cpu':>7}{'db':>7}{'queries':>8}"
    f"{'KB':>6}  target: wall/target (cpu/target)"
)


def main() -> None:
    django_on_scratch_database("_dashbench", LOG_LEVEL=os.environ.get("LOG_LEVEL", "WARNING"))
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["*"]
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from sessions.models import Message, Session
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    texts, outputs = workload_texts()
    key, _ = agent_key_create(name="bench")
    print(
        f"seeding {MESSAGES:,} messages with {TOOL_OUTPUTS} tool outputs "
        f"({len(texts)} texts, {len(outputs)} outputs from workloads)…",
        flush=True,
    )
    start = time.perf_counter()
    session = seed(key, texts, outputs)
    for i in range(500):
        session_create(owner=key, data={"id": f"other-{i}", "model": "gpt-4o"})
    figure(
        f"seeded in {time.perf_counter() - start:.0f} s: {session.message_count:,} messages, "
        f"{Message.objects.filter(session=session, role='tool').count()} tool outputs, "
        f"{session.used_tokens:,} tokens in the window, guard {session.guard_status}",
        flush=True,
    )

    # What autovacuum does within a minute of a bulk load; the timeline's range
    # scan does not depend on it, but other plans (counts) do.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")

    user = get_user_model().objects.create_user(username="bench-op", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    hx = {"HX-Request": "true"}
    pk = session.pk
    tool = Message.objects.filter(session=session, role="tool").order_by("-seq").first()
    big_output = (
        Message.objects.filter(session=session, role="tool")
        .exclude(output_ref=None)
        .order_by("-token_count")
        .first()
    )
    ref = big_output.output_ref if big_output else tool.output_ref
    from sessions.models import ToolOutput

    stored = ToolOutput.objects.get(ref=ref)
    middle = max(1, stored.line_count // 2)
    first_page_before = None
    from sessions.dashboard.selectors.timeline import timeline_page

    first_page_before = timeline_page(Session.objects.get(pk=pk)).before

    def url(name: str, *args: object, query: str = "") -> str:
        return reverse(f"dashboard:{name}", args=args) + query

    page, part = ("first page", None, 150), ("partial", hx, 50)
    rows = [
        ("GET /sessions/<pk>/ (inspector)", url("session_detail", pk), page),
        ("GET / (sessions list, 501 sessions)", url("session_list"), page),
        ("budget (polled every 10 s)", url("session_budget", pk), part),
        ("usage over turns (SVG)", url("session_usage", pk), part),
        ("timeline, newest turns", url("session_timeline", pk), part),
        (
            "timeline, older page (revealed)",
            url("session_timeline", pk, query=f"?before={first_page_before}"),
            part,
        ),
        ("sessions list rows (polled every 5 s)", url("session_list"), part),
        ("output viewer, first 200 lines", url("output_view", pk, ref, query="?m=1"), part),
        (
            f"output, jump to line {middle:,} of {stored.line_count:,}",
            url("output_view", pk, ref, query=f"?m=1&part=lines&line={middle}"),
            part,
        ),
        (
            "output grep 'error' ±2",
            url("output_grep", pk, ref, query="?m=1&pattern=error&i=1&context=2"),
            part,
        ),
        ("full message text", url("message_full", pk, 2), part),
        ("compaction history", url("compaction_history", pk), part),
        (
            "context tab anthropic (10,000-message window)",
            url("session_context", pk, query="?format=anthropic"),
            part,
        ),
        (
            "context tab openai (10,000-message window)",
            url("session_context", pk, query="?format=openai"),
            part,
        ),
    ]
    print(HEADER)
    report(client, rows)

    # 10,000 context-build records on the same session.
    start = time.perf_counter()
    call_id = dashboard_calls.seed_calls(Session.objects.get(pk=pk))
    print(f"\nseeded {dashboard_calls.CALLS:,} calls in {time.perf_counter() - start:.0f} s")
    # What autovacuum does after a bulk insert (PostgreSQL 13+: the insert
    # threshold): the visibility map that lets the covering indexes answer alone.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(HEADER)
    report(client, dashboard_calls.rows_for(url, pk, call_id, page, part))
    small = dashboard_calls.make_session(key, "small", 10, outputs)
    mid = dashboard_calls.make_session(key, "mid", 300, outputs)
    dashboard_calls.query_counts(client, url, small.pk, pk, hx)
    print("\nContextCall write on a context GET:")
    for s, label in ((small, "10 messages"), (mid, "300 messages"), (session, "10,000 messages")):
        dashboard_calls.write_cost(Session.objects.get(pk=s.pk), label)

    # The same inspector after one compaction (the usual shape of a long session).
    from compaction.services.execute import compaction_execute
    from compaction.services.requests import compaction_request

    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    start = time.perf_counter()
    run = compaction_execute(run_id=run.pk)
    elapsed = time.perf_counter() - start
    figure(
        f"\ncompaction ({run.status}, {'/'.join(run.strategies_run)}): "
        f"{run.before_tokens:,} → {run.after_tokens:,} tokens in {elapsed:.1f} s"
    )
    snapshot = url("snapshot_detail", pk, run.snapshot.pk) if run.changed else None
    report(
        client,
        [
            ("GET /sessions/<pk>/ after compaction", url("session_detail", pk), page),
            ("compaction status poll (286)", url("compaction_status", pk, run.pk), part),
            ("snapshot before/after", snapshot or url("compaction_history", pk), part),
            (
                "context tab anthropic (compacted window)",
                url("session_context", pk, query="?format=anthropic"),
                part,
            ),
        ],
    )
    # Policy page, finder, predicted vs actual; query counts beside a small session's.
    dashboard_find.report(client, url, session, key)


def report(client, rows) -> None:
    for label, path, (kind, headers, target) in rows:
        t = timed(client, path, headers)
        flag = "ok" if t["wall"] <= target else ("ok on cpu" if t["cpu"] <= target else "OVER")
        print(
            f"{kind:11}{label:48}{t['wall']:6.1f} {t['p95']:6.1f} {t['cpu']:6.1f} {t['db']:6.1f}"
            f" {t['queries']:6d} {t['size'] / 1024:6.0f}  ≤ {target} ms: {t['wall'] / target:.2f}"
            f" ({t['cpu'] / target:.2f}) {flag}",
            flush=True,
        )
        record(
            f"{kind.strip()} {label}",
            f"wall p50 {t['wall']:.1f} ms, p95 {t['p95']:.1f}, CPU {t['cpu']:.1f}, DB {t['db']:.1f};"
            f" {t['queries']} queries, {t['size'] / 1024:.0f} KB (target ≤ {target} ms: {flag})",
        )


if __name__ == "__main__":
    with recording(__file__):
        main()
