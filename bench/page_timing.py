"""Server time of one dashboard page, as bench_dashboard.py and dashboard_find.py read it."""

from __future__ import annotations

import statistics
import time

RUNS = 15


def timed(client, url: str, headers: dict | None = None) -> dict[str, float]:
    """Server time of one page as the view sees it (Django's test client in
    process), medians of ``RUNS`` after a warm-up: wall and p95, this process's
    CPU (Python's share: the figure to read on a busy machine), the time spent
    in the database driver's ``execute`` (PostgreSQL's share plus the round
    trips), the number of queries and the size."""
    from django.db import connection

    for _ in range(2):  # warm-up (template compilation, tokenizer, connections)
        response = client.get(url, headers=headers or {})
        assert response.status_code in (200, 286), (url, response.status_code)
    db: list[float] = []

    def in_db(execute, sql, params, many, context):
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            db.append(time.perf_counter() - start)

    times, cpu, db_ms, queries = [], [], [], 0
    with connection.execute_wrapper(in_db):
        for _ in range(RUNS):
            db.clear()
            start, start_cpu = time.perf_counter(), time.process_time()
            response = client.get(url, headers=headers or {})
            if hasattr(response, "streaming_content"):
                b"".join(response.streaming_content)
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
            db_ms.append(sum(db) * 1000)
            queries = len(db)
    size = len(response.content) if not hasattr(response, "streaming_content") else 0
    return {
        "wall": statistics.median(times),
        "p95": sorted(times)[int(0.95 * (len(times) - 1))],
        "cpu": statistics.median(cpu),
        "db": statistics.median(db_ms),
        "queries": queries,
        "size": size,
    }
