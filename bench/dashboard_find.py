"""bench_dashboard.py's rows for the policy page, the timeline finder and predicted vs actual.

Each page or partial is timed on the 10,000-message session and, for the query
count, also on a small one: the count must be the same whatever the size. CPU
time (``time.process_time``, this process: view, templates, the driver) is
printed beside the wall time, which the other helpers' load on a shared
machine inflates.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common import record
from page_timing import timed


def _small_session(owner):
    from sessions.services.append import session_append_messages
    from sessions.services.sessions import session_create

    small = session_create(owner=owner, data={"id": "small-find", "model": "claude-sonnet-4-6"})
    batch = []
    for t in range(25):
        batch += [
            {"role": "user", "content": f"step {t}: fix the error in module {t}"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": f"s{t}", "name": "bash", "arguments": {"command": "make"}}],
            },
            {"role": "tool", "tool_call_id": f"s{t}", "content": f"error: step {t} failed"},
            {"role": "assistant", "content": f"fixed {t}"},
        ]
    session_append_messages(session=small, messages=batch)
    small.refresh_from_db()
    return small


def report(client, url: Callable[..., str], session, owner) -> None:
    """Policy page, finder (jump, filters, search), predicted vs actual: big vs small session."""
    from compaction.dashboard.predictions import preview_prediction
    from compaction.dashboard.selectors import compaction_preview
    from compaction.services.execute import compaction_execute
    from compaction.services.requests import compaction_request
    from sessions.models import Session

    small = _small_session(owner)
    session = Session.objects.get(pk=session.pk)
    hx = {"HX-Request": "true"}
    mid_seq, mid_turn = session.last_seq // 2, 600

    started = time.perf_counter()
    compaction_preview(session, strategy="chain")
    preview_ms = (time.perf_counter() - started) * 1000
    runs = {}
    for s in (session, small):
        run, _ = compaction_request(
            session=s,
            trigger="manual",
            reason={"kind": "manual"},
            enqueue=False,
            prediction=preview_prediction(compaction_preview(s, strategy="chain")),
        )
        runs[s.pk] = compaction_execute(run_id=run.pk)
    print(
        f"\nthe preview kept with a manual run (dry run of the 10,000-message window): "
        f"{preview_ms:.0f} ms, once per Compact click"
    )

    def rows(s, seq: int, turn: int) -> list[tuple[str, str, dict, int]]:
        find = "session_find"
        return [
            ("policy page", url("session_policy", s.pk), {}, 150),
            (f"jump to #{seq:,}", url(find, s.pk, query=f"?seq={seq}"), hx, 50),
            (f"jump to turn {turn}", url(find, s.pk, query=f"?turn={turn}"), hx, 50),
            ("filter: tool results", url(find, s.pk, query="?kind=tool"), hx, 50),
            ("filter: trimmed outputs", url(find, s.pk, query="?kind=trimmed"), hx, 50),
            ("filter: largest", url(find, s.pk, query="?kind=largest"), hx, 50),
            ("filter: largest, page 5", url(find, s.pk, query="?kind=largest&page=5"), hx, 50),
            ("filter: errors", url(find, s.pk, query="?kind=errors"), hx, 50),
            ("search 'error'", url(find, s.pk, query="?q=error"), hx, 50),
            ("search 'no such phrase'", url(find, s.pk, query="?q=zebracorn+quux"), hx, 50),
            ("timeline (inline call arguments)", url("session_timeline", s.pk), hx, 50),
            (
                "compaction status, predicted vs actual",
                url("compaction_status", s.pk, runs[s.pk].pk),
                hx,
                50,
            ),
            ("compaction history with predictions", url("compaction_history", s.pk), hx, 50),
        ]

    big_rows = rows(session, mid_seq, mid_turn)
    small_rows = rows(small, 50, 12)
    print(
        f"\n{'':2}{'dashboard pages and partials':42}{'wall':>7}{'cpu':>7}{'db':>7}{'queries':>8}"
        f"{'small':>6}  target: wall/target (cpu/target)"
    )
    for (label, path, headers, target), (_, small_path, _, _) in zip(
        big_rows, small_rows, strict=True
    ):
        t = timed(client, path, headers)
        wall, cpu, db, queries = t["wall"], t["cpu"], t["db"], t["queries"]
        small_queries = timed(client, small_path, headers)["queries"]
        flag = "ok" if wall <= target else ("ok (cpu)" if cpu <= target else "OVER")
        same = "" if queries == small_queries else "  QUERIES GROW"
        print(
            f"  {label:42}{wall:6.1f} {cpu:6.1f} {db:6.1f} {queries:7d} {small_queries:5d}"
            f"  ≤ {target} ms: {wall / target:.2f} ({cpu / target:.2f}) {flag}{same}",
            flush=True,
        )
        record(
            f"{label} (vs a 10-message session)",
            f"wall {wall:.1f} ms, CPU {cpu:.1f}, DB {db:.1f}; {queries} queries"
            f" (small session {small_queries}); target ≤ {target} ms: {flag}{same}",
        )
