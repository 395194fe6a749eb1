"""The append beside its floor. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc REDIS_URL=redis://... \\
        python bench/bench_floor.py

The floor (``floor_app.py``) is a one-file Django application doing the same
durable, counted append — the key checked by its hash, each message's tokens
counted with contextsvc's tokenizer and rule, the messages INSERTed with their
counts and the session's counters updated, in one PostgreSQL transaction, in
one statement per table — served the same way (gunicorn, the project's
gunicorn.conf.py and worker class). Beside it, contextsvc's real append
endpoint twice: with the per-key limits as shipped (rates, body megabytes and
pace on but out of the clients' reach, the thread share, one big body at a
time) and with every limit off. All three servers run at once, BENCH_WORKERS
(2) workers each; rounds are interleaved so that the machine's noise falls on
all three alike. 4 keep-alive clients, each its own key and session, post
3-message batches; p50 / p99 per server and the ratios to the floor.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from common import (
    ROOT,
    Http,
    django_on_scratch_database,
    figure,
    free_port,
    gunicorn,
    pct,
    recording,
)

BENCH = Path(__file__).resolve().parent
CLIENTS = 4
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "6"))
PER_ROUND = int(os.environ.get("BENCH_PER_ROUND", "60"))  # requests per client per round
WORKERS = int(os.environ.get("BENCH_WORKERS", "2"))

CREATE_TABLES = """
CREATE TABLE IF NOT EXISTS floor_session (
    id text PRIMARY KEY, key_hash char(64) NOT NULL,
    message_count integer NOT NULL DEFAULT 0, tokens bigint NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS floor_message (
    id bigserial PRIMARY KEY,
    session_id text NOT NULL REFERENCES floor_session(id),
    seq integer NOT NULL, role text NOT NULL, content text NOT NULL, tokens integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, seq));
"""

LIMITS_ON = {  # the shipped limits, their rates out of the clients' reach
    "CONTEXTSVC_RATE_LIMIT": "1000000/minute",
    "CONTEXTSVC_RATE_LIMIT_MB": "128/minute",
    "CONTEXTSVC_RATE_PACE": "1000000/second",
    "CONTEXTSVC_KEEP_THREAD_FREE": "true",
    "CONTEXTSVC_MAX_HEAVY_PER_KEY": "1",
    "CONTEXTSVC_MAX_CONCURRENT_PER_KEY": "0",
}
LIMITS_OFF = {
    "CONTEXTSVC_RATE_LIMIT": "off",
    "CONTEXTSVC_RATE_LIMIT_MB": "off",
    "CONTEXTSVC_RATE_PACE": "off",
    "CONTEXTSVC_KEEP_THREAD_FREE": "false",
    "CONTEXTSVC_MAX_HEAVY_PER_KEY": "0",
    "CONTEXTSVC_MAX_CONCURRENT_PER_KEY": "0",
}


@contextmanager
def served(db_url: str, limits: dict[str, str]):
    saved = {name: os.environ.get(name) for name in limits}
    os.environ.update(limits)  # common.gunicorn keeps what is set
    try:
        with gunicorn(db_url, workers=WORKERS) as (port, _):
            yield port
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def floor_server(db_url: str):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(DATABASE_URL=db_url, PYTHONPATH=str(BENCH))
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "floor_app:application", "-b", f"127.0.0.1:{port}"]
        + ["-w", str(WORKERS), "--log-level", "warning"],
        cwd=ROOT,  # the project's gunicorn.conf.py
        env=env,
    )
    try:
        for _ in range(300):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def texts() -> list[str]:
    shared = Path(os.environ.get("CONTEXTSVC_SHARED") or ROOT.parent / "shared")
    found = []
    for path in sorted((shared / "workloads" / "real").glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            content = json.loads(line).get("content")
            if isinstance(content, str) and 200 <= len(content) <= 4000:
                found.append(content)
    return found or ["def handler(event):\n    return process(event['body'])\n" * 12]


def one_round(port: int, keys: list[str], sids: list[str], words: list[str], out: list) -> None:
    lock = threading.Lock()

    def client(n: int) -> None:
        http = Http(port, keys[n])
        mine = []
        for i in range(PER_ROUND):
            batch = {
                "messages": [
                    {"role": role, "content": words[(i * 3 + k + n * 7) % len(words)]}
                    for k, role in enumerate(("user", "assistant", "user"))
                ]
            }
            status, _, ms = http.call("POST", f"sessions/{sids[n]}/messages", batch)
            assert status == 200, status
            mine.append(ms)
        with lock:
            out.extend(mine[3:])  # a new connection's first calls

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> None:
    db_url = django_on_scratch_database("_floor")
    from django.db import connection

    from sessions.models import hash_key
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    words = texts()
    keys, sids = [], []
    for n in range(CLIENTS):
        key, raw = agent_key_create(name=f"floor{n}")
        session_create(owner=key, data={"model": "claude-sonnet-4-5", "id": f"c{n}"})
        keys.append(raw)
        sids.append(f"c{n}")
    with connection.cursor() as cursor:
        cursor.execute(CREATE_TABLES)
        for sid, raw in zip(sids, keys, strict=True):
            cursor.execute(
                "INSERT INTO floor_session (id, key_hash) VALUES (%s, %s)", [sid, hash_key(raw)]
            )
    connection.close()

    figures: dict[str, list[float]] = {"floor": [], "limits on": [], "limits off": []}
    with ExitStack() as stack:
        ports = {
            "floor": stack.enter_context(floor_server(db_url)),
            "limits on": stack.enter_context(served(db_url, LIMITS_ON)),
            "limits off": stack.enter_context(served(db_url, LIMITS_OFF)),
        }
        for port in ports.values():  # warm up every worker
            one_round(port, keys, sids, words, [])
        for r in range(ROUNDS):
            order = list(ports) if r % 2 == 0 else list(reversed(ports))
            for name in order:
                one_round(ports[name], keys, sids, words, figures[name])
    floor50 = pct(figures["floor"], 0.5)
    print(
        f"append of 3 messages, {CLIENTS} keep-alive clients, gunicorn -w {WORKERS} "
        f"(gunicorn.conf.py), {ROUNDS} interleaved rounds of {PER_ROUND} calls per client:"
    )
    for name, values in figures.items():
        ratio = "" if name == "floor" else f"  → p50 {pct(values, 0.5) / floor50:.2f}× the floor"
        label = "the floor" if name == "floor" else f"contextsvc, {name}"
        figure(
            f"  {label}: p50 {pct(values, 0.5):6.2f} ms  p99 {pct(values, 0.99):6.2f} ms"
            f"  ({len(values)} calls){ratio}"
        )
    print("  target: contextsvc with the limits on ≤ 1.3× the floor's p50")


if __name__ == "__main__":
    with recording(__file__):
        main()
