"""What every benchmark needs: a scratch PostgreSQL database, percentiles,
a free loopback port, a keep-alive HTTP client for the API, a real gunicorn,
the memory of its workers (Linux /proc), and its figures kept as JSON
(var/bench/<bench>.json) for docs/benchmarks.md (``bin/docs bench``)."""

from __future__ import annotations

import gc
import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# The team's shared folder sits next to the checkout; a git worktree elsewhere names it.
SHARED = Path(os.environ.get("CONTEXTSVC_SHARED") or ROOT.parent / "shared")
WORKLOADS = SHARED / "workloads" / "real"

# Outside DEBUG the settings refuse a missing SECRET_KEY and redirect plain HTTP
# to HTTPS; a benchmark is a local run over plain HTTP (its gunicorn inherits these).
os.environ.setdefault("SECRET_KEY", "contextsvc-bench-" + secrets.token_urlsafe(48))
os.environ.setdefault("CONTEXTSVC_PLAIN_HTTP", "true")


def _admin(url: str, *statements: str) -> None:
    import psycopg

    admin = urlunparse(urlparse(url)._replace(path="/postgres"))
    with psycopg.connect(admin.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def scratch_database(suffix: str) -> str:
    """A new, empty database named after DATABASE_URL's plus ``suffix``; its URL."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("Set DATABASE_URL=postgres://... (the figures are for PostgreSQL)")
    parts = urlparse(url)
    name = (parts.path.lstrip("/") or "contextsvc") + suffix
    _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    return urlunparse(parts._replace(path=f"/{name}"))


def drop_database(url: str) -> None:
    name = urlparse(url).path.lstrip("/")
    _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def client_gc_paused() -> Iterator[None]:
    """No garbage collection in this (the measuring) process while a timed call
    runs: the bench holds the fake upstream and every history in its own heap,
    and one of its full collections (70-110 ms) landing inside a call was the
    whole p99 of the added latency — a cost of the client, not the service.
    Collected before, so nothing piles up."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def huge_text(kind: str, size: int) -> str:
    """``size`` characters: one unbroken word (``one-word``: byte-pair encoding's
    worst case) or the workloads' own text repeated (real agent text)."""
    if kind == "one-word":
        return ("abcdefghij" * (size // 10 + 1))[:size]
    parts = []
    for path in sorted(WORKLOADS.glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            content = json.loads(line).get("content")
            if isinstance(content, str) and content:
                parts.append(content)
    text = "\n".join(parts) or "def handler(event):\n    return process(event['body'])\n"
    return (text * (size // len(text) + 1))[:size]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Http:
    """One keep-alive connection to the API with an agent key; times each call."""

    def __init__(self, port: int, key: str, *, timeout: float = 600) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.key = key

    def call(
        self, method: str, path: str, body: object = None, *, raw=None, headers=None
    ) -> tuple[int, bytes, float]:
        hdrs = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        hdrs.update(headers or {})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        start = time.perf_counter()
        self.conn.request(method, f"/api/v1/{path}", body=data, headers=hdrs)
        response = self.conn.getresponse()
        payload = response.read()
        return response.status, payload, (time.perf_counter() - start) * 1000


# The benchmarks drive one agent key from several clients as fast as they can:
# per-key limits would refuse them. Rates stay on (their cost is measured), far
# out of reach; the concurrency limit is off (bench_ratelimit.py times it).
BENCH_LIMITS = {
    "CONTEXTSVC_RATE_LIMIT": "1000000/second",
    "CONTEXTSVC_RATE_LIMIT_MB": "1000000/second",
    "CONTEXTSVC_RATE_PACE": "1000000/second",
    "CONTEXTSVC_MAX_CONCURRENT_PER_KEY": "0",
    "CONTEXTSVC_KEEP_THREAD_FREE": "false",
    "CONTEXTSVC_MAX_HEAVY_PER_KEY": "0",
}


@contextmanager
def gunicorn(
    db_url: str,
    *,
    workers: int | None,
    timeout: int = 30,
    limits: dict[str, str] | None = None,
) -> Iterator[tuple[int, subprocess.Popen]]:
    """A real gunicorn serving the project on a free loopback port: (port, process).

    ``workers`` None: gunicorn.conf.py's. ``limits``: the per-key limit variables
    to serve with, every other one at its shipped default (None: out of reach,
    ``BENCH_LIMITS``)."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": db_url, "DEBUG": "false", "LOG_LEVEL": "WARNING"}
    if limits is None:
        for name, value in BENCH_LIMITS.items():
            env.setdefault(name, value)
    else:
        env = {k: v for k, v in env.items() if not k.startswith("CONTEXTSVC_")} | limits
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "contextsvc.wsgi:application",
            "-b",
            f"127.0.0.1:{port}",
            *(["-w", str(workers)] if workers is not None else []),
            "--timeout",
            str(timeout),
            "--log-level",
            "warning",
            *os.environ.get("BENCH_GUNICORN_ARGS", "").split(),
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port, server
    finally:
        server.terminate()
        server.wait(timeout=10)


def django_on_scratch_database(suffix: str, **env: str) -> str:
    """A scratch database, Django set up on it (``env`` first) and migrated; its URL."""
    db_url = scratch_database(suffix)
    os.environ["DATABASE_URL"] = db_url
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextsvc.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return db_url


# --- process memory (Linux /proc) ------------------------------------------------------


def worker_pids(master: int, count: int = 1) -> list[int]:
    """The pids of a gunicorn master's workers, once ``count`` of them are up."""
    for _ in range(100):
        try:
            children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        except OSError:
            children = []
        if len(children) >= count:
            return [int(c) for c in children]
        time.sleep(0.1)
    raise RuntimeError("no gunicorn worker")


def worker_pid(master: int) -> int:
    return worker_pids(master)[0]


def proc_status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


class Peak:
    """Peak RSS growth of a process over a ``with`` block (VmHWM reset via clear_refs)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.growth = 0

    def __enter__(self) -> Peak:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            pass
        self.start = proc_status(self.pid, "VmRSS")
        return self

    def __exit__(self, *exc) -> None:
        self.growth = max(0, proc_status(self.pid, "VmHWM") - self.start)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


# The benchmarks drive one key as fast as they can: rates stay on (their cost is
# measured) but far out of reach; the concurrency limit is off.
OUT_OF_REACH = {
    "CONTEXTSVC_RATE_LIMIT": "1000000/second",
    "CONTEXTSVC_RATE_LIMIT_MB": "1000000/second",
    "CONTEXTSVC_RATE_PACE": "1000000/second",
    "CONTEXTSVC_MAX_CONCURRENT_PER_KEY": "0",
}


def proxy_process(db_url: str, **env: str) -> tuple[int, subprocess.Popen]:
    """The proxy as deployed (gunicorn, one uvicorn worker) on a free port: (port, process).

    ``env`` adds settings (the upstream URLs and keys) to the limits out of reach.
    """
    port = free_port()
    full = {
        **os.environ,
        **OUT_OF_REACH,
        "DATABASE_URL": db_url,
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        **env,
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "contextsvc.asgi:application"]
        + ["-k", "uvicorn_worker.UvicornWorker", "-w", "1", "-b", f"127.0.0.1:{port}"]
        + ["--log-level", "warning", "--timeout", "300"],
        cwd=ROOT,
        env=full,
    )
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return port, server
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the proxy did not start")


def against(value: float, limit: float, unit: str = "ms") -> str:
    """``value`` with its target: ``12.3 ms (≤ 15 ms: 0.82×, met)``."""
    verdict = "met" if value <= limit else "MISSED"
    return f"{value:.2f} {unit} (≤ {limit:g} {unit}: {value / limit:.2f}×, {verdict})"


def growth(per_call: dict[int, float]) -> str:
    """CPU per call at the longest history over the shortest (target 1.00: no growth)."""
    sizes = sorted(per_call)
    if len(sizes) < 2 or not per_call[sizes[0]]:
        return "growth: one history only"
    ratio = per_call[sizes[-1]] / per_call[sizes[0]]
    return f"growth {sizes[0]} → {sizes[-1]}: {ratio:.2f}× (target 1.00: not growing)"


# --- figures as JSON (docs/benchmarks.md) -----------------------------------------------

FIGURES: list[dict[str, str]] = []


def record(measure: str, result: str) -> None:
    """Keep one figure for the bench's JSON without printing it."""
    FIGURES.append({"measure": " ".join(measure.split()), "result": " ".join(result.split())})


def figure(text: str, *, flush: bool = True) -> None:
    """Print one line of figures and keep it: ``measure: result`` (split at the first ": ")."""
    print(text, flush=flush)
    measure, sep, result = text.strip().partition(": ")
    record(measure, result if sep else "")


@contextmanager
def recording(script: str) -> Iterator[None]:
    """Run a bench's main; when it finishes, write its figures to var/bench/<bench>.json
    (BENCH_JSON_DIR elsewhere) with when, how long and how loaded the machine was."""
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    yield
    name = Path(script).stem
    folder = Path(os.environ.get("BENCH_JSON_DIR") or ROOT / "var" / "bench")
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "bench": name,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "seconds": round(time.perf_counter() - started),
        "cpus": os.cpu_count(),
        "load": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "figures": FIGURES,
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"figures written to {path}")
