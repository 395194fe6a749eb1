"""The calls part of bench_dashboard: 10,000 ContextCall records on the
inspector's session, the cost pages, the constant query count, and what writing
a record adds to a context GET. Prints figures; asserts nothing."""

from __future__ import annotations

import statistics
import time
from typing import Any

from common import record

CALLS = 10_000
WRITE_RUNS = 200


def seed_calls(session: Any) -> int:
    """``CALLS`` records spread over the transcript, each a copy of one real
    build's record (same breakdown size), completed like a reported call."""
    from django.utils import timezone

    from prompting.context.service import context_for_call
    from sessions.models import ContextCall

    context_for_call(session=session, fmt="anthropic", preflight=False)
    real = ContextCall.objects.filter(session=session).latest("id")
    step = max(1, session.last_seq // CALLS)
    now = timezone.now()
    rows = []
    for i in range(CALLS - 1):
        through = min(session.last_seq, 1 + i * step)
        rows.append(
            ContextCall(
                session=session,
                source="proxy" if i % 3 else "api",
                format="anthropic",
                model=real.model,
                first_seq=1,
                through_seq=through,
                message_count=through,
                guard_status="ok",
                effective_window=real.effective_window,
                compact_at=real.compact_at,
                estimated_input=real.estimated_input * through // max(1, session.last_seq),
                components=real.components,
                breakdown=real.breakdown,
                breakpoints=real.breakpoints,
                prices=real.prices,
                cost_usd=0.01,
                cost_without_cache_usd=0.03,
                completed_at=now,
                reported_input=1_000,
                reported_output=200,
                cache_read=5_000,
                cache_write=100,
                created_at=now,
            )
        )
    ContextCall.objects.bulk_create(rows, batch_size=1000)
    return real.pk


def make_session(owner: Any, sid: str, messages: int, outputs: list[str]) -> Any:
    """A session of ``messages`` messages (a tool call and its output every 10), built once."""
    from prompting.context.service import context_for_call
    from sessions.models import Session
    from sessions.services.append import session_append_messages
    from sessions.services.sessions import session_create

    session = session_create(owner=owner, data={"id": sid, "model": "claude-sonnet-4-5"})
    batch: list[dict] = []
    for i in range(messages):
        if i % 10 == 8:
            call = f"c{i}"
            batch.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": call, "name": "bash", "arguments": {}}],
                }
            )
            batch.append(
                {"role": "tool", "tool_call_id": call, "content": outputs[i % len(outputs)][:4000]}
            )
        elif i % 10 != 9:
            batch.append(
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 20}
            )
    session_append_messages(session=session, messages=batch)
    session = Session.objects.get(pk=session.pk)
    context_for_call(session=session, fmt="anthropic", preflight=False)
    return session


def rows_for(url: Any, pk: int, call_id: int, page: tuple, part: tuple) -> list[tuple]:
    return [
        ("GET /sessions/<pk>/ (with 10,000 calls)", url("session_detail", pk), page),
        ("calls & cost card", url("session_calls", pk), part),
        ("calls, older rows (cursor)", url("session_calls", pk, query=f"?before={call_id}"), part),
        ("what was sent in one call", url("session_call", pk, call_id), part),
        ("what was sent at turn 100", url("session_call_at", pk, query="?turn=100"), part),
        ("usage over turns (from 10,000 calls)", url("session_usage", pk), part),
        ("cost per day, all sessions", url("cost_overview"), part),
        ("sessions list with cost and trend", url("session_list"), part),
    ]


def query_counts(client: Any, url: Any, small_pk: int, big_pk: int, hx: dict) -> None:
    """The same page for a 10-message session and the 10,000-message one."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    print("\nqueries, small session (10 messages, 1 call) vs big (10,000 messages, 10,000 calls):")
    for name, headers in (
        ("session_detail", {}),
        ("session_calls", hx),
        ("session_usage", hx),
        ("session_budget", hx),
        ("session_context", hx),
    ):
        counts = []
        for pk in (small_pk, big_pk):
            with CaptureQueriesContext(connection) as q:
                client.get(url(name, pk), headers=headers)
            counts.append(len(q))
        flag = "constant" if counts[0] == counts[1] else "DIFFERS"
        print(f"  {name:18}{counts[0]:4d} vs {counts[1]:4d}  {flag}")


def write_cost(session: Any, label: str) -> None:
    """What the record adds to a context GET: the whole build with and without
    it, interleaved (wall and this process's CPU time), and the record alone
    (breakdown + one INSERT, sharing the build's commit)."""
    import prompting.context.service as service
    from prompting.context.service import context_for_call
    from prompting.services import calls

    real = calls.context_call_record
    alone: list[tuple[float, float]] = []

    def timed_record(**kw: Any) -> Any:
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            return real(**kw)
        finally:
            alone.append(
                ((time.perf_counter() - start) * 1000, (time.process_time() - start_cpu) * 1000)
            )

    def once(record: Any) -> tuple[float, float]:
        service.context_call_record = record
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            context_for_call(session=session, fmt="anthropic", preflight=False)
            return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000
        finally:
            service.context_call_record = real

    runs = max(20, WRITE_RUNS // max(1, session.last_seq // 500))
    for _ in range(3):
        once(real)
    without, with_record = [], []
    for _ in range(runs):
        without.append(once(lambda **kw: None))
        with_record.append(once(timed_record))

    def med(rows: list[tuple[float, float]], i: int) -> float:
        return statistics.median(r[i] for r in rows)

    wall_a, wall_b = med(without, 0), med(with_record, 0)
    cpu_a, cpu_b = med(without, 1), med(with_record, 1)
    rec, rec_cpu = med(alone, 0), med(alone, 1)
    flag = "ok" if rec <= 1.0 else ("ok on cpu" if rec_cpu <= 1.0 else "OVER")
    print(
        f"  {label:18} GET /context wall {wall_a:6.2f} → {wall_b:6.2f} ms (+{wall_b - wall_a:4.2f}),"
        f" cpu {cpu_a:6.2f} → {cpu_b:6.2f} (+{cpu_b - cpu_a:4.2f});"
        f" record alone {rec:4.2f} ms wall, {rec_cpu:4.2f} cpu"
        f"  ≤ 1 ms: {rec:.2f} ({rec_cpu:.2f}) {flag}",
        flush=True,
    )
    record(
        f"ContextCall write, {label}",
        f"GET /context wall {wall_a:.2f} → {wall_b:.2f} ms, CPU {cpu_a:.2f} → {cpu_b:.2f};"
        f" the record alone {rec:.2f} ms wall, {rec_cpu:.2f} CPU (target ≤ 1 ms: {flag})",
    )
