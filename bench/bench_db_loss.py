"""What a lost PostgreSQL connection costs. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_db_loss.py

Uses its own database (<name>_dbloss) and a real gunicorn (the project's
gunicorn.conf.py; BENCH_WORKERS workers, 2 by default, each with its threads).
Every cycle warms all the server's database connections, terminates them with
``pg_terminate_backend`` (as a database restart or failover would), then has
one keep-alive client per server thread append for a while. It prints how many
requests failed (target: at most one per connection), what they answered, how
long each failure took to answer (target: <= 50 ms), and the appends' p50
before and after.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import uuid

import psycopg
from common import Http, django_on_scratch_database, figure, gunicorn, pct, recording


def main() -> None:
    db_url = django_on_scratch_database("_dbloss")
    # Django is set up only now, on the scratch database.
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    key, raw = agent_key_create(name="bench")
    workers = int(os.environ.get("BENCH_WORKERS", "2"))
    threads = int(os.environ.get("GUNICORN_THREADS", "2"))
    clients = workers * threads
    for n in range(clients):
        session_create(owner=key, data={"model": "claude-sonnet-4-5", "id": f"s{n}"})
    app = f"bench-dbloss-{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(db_url.replace("postgres://", "postgresql://", 1), autocommit=True)

    def backends() -> list[int]:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchall()
        return [pid for (pid,) in rows]

    def burst(agents: list[Http], per_client: int) -> list[tuple[int, bytes, float]]:
        results: list[tuple[int, bytes, float]] = []
        lock = threading.Lock()
        start = threading.Barrier(len(agents))

        def run(i: int, agent: Http) -> None:
            start.wait()
            for j in range(per_client):
                body = {"messages": [{"role": "user", "content": f"client {i} message {j}"}]}
                got = agent.call("POST", f"sessions/s{i}/messages", body)
                with lock:
                    results.append(got)

        pool = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(agents)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return results

    cycles = int(os.environ.get("BENCH_CYCLES", "5"))
    with gunicorn(f"{db_url}?application_name={app}", workers=workers) as (port, _server):
        agents = [Http(port, raw) for _ in range(clients)]
        burst(agents, 20)  # connect every thread
        normal, after, failures, failed_ms, killed = [], [], [], [], 0
        for _ in range(cycles):
            normal += [ms for status, _, ms in burst(agents, 20) if status == 200]
            pids = backends()
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))
            killed += len(pids)
            results = burst(agents, 20)
            after += [ms for status, _, ms in results if status == 200]
            for status, payload, ms in results:
                if status != 200:
                    code = json.loads(payload)["error"]["code"] if payload[:1] == b"{" else "HTML"
                    failures.append((status, code))
                    failed_ms.append(ms)

    figure(f"gunicorn: {workers} workers x {threads} threads, {cycles} terminate cycles")
    figure(f"connections terminated: {killed}; requests failed after: {len(failures)}")
    figure(f"failures answered: {sorted(set(failures))}")
    if failed_ms:
        figure(
            f"503 answered in: median {statistics.median(failed_ms):.1f} ms, "
            f"max {max(failed_ms):.1f} ms"
        )
    figure(
        f"append p50: before a terminate {pct(normal, 0.5):.2f} ms, after {pct(after, 0.5):.2f} ms"
    )


if __name__ == "__main__":
    with recording(__file__):
        main()
