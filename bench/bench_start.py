"""bin/run's start-up: a first start on an empty var folder, then restarts.

Each round runs the real ``bin/run`` (packages already installed: bin/setup's
stamps are current) with a scratch var folder, SQLite database and ports, and
times from the command to the first 200 of the ready curl it prints (the demo
session's context, with the demo agent key), then stops it (SIGTERM to its
process group). It also prints the CPU time the web server process had used by
then: the part of a start that does not depend on how busy the machine is. The first round starts on an empty folder (migrations, the demo
data, a new key); every later round is a restart with nothing to do.

    .venv/bin/python bench/bench_start.py [restarts, default 5] [checkout]

``checkout``: another copy of the project whose ``bin/run`` to time instead
(e.g. an older version, for a before/after on the same machine and load).
"""

from __future__ import annotations

import http.client
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, free_port

DEMO_PATH = "/api/v1/sessions/demo/context?format=anthropic"
# Whatever the caller's shell points the service at, the rounds use their own.
DROPPED = (
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "SECRET_KEY",
    "SECRET_KEY_FILE",
    "DJANGO_SETTINGS_MODULE",
    "CONTEXTSVC_PLAIN_HTTP",
)


def _ready(port: int, key_file: Path) -> bool:
    if not key_file.exists():
        return False
    key = key_file.read_text().strip()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", DEMO_PATH, headers={"Authorization": f"Bearer {key}"})
        status = conn.getresponse().status
        conn.close()
    except OSError:
        return False
    return status == 200


def _web_cpu(group: int) -> float:
    """CPU seconds the web server process (in ``group``) has used so far."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[2]) == group and (b"serve_demo" in cmdline or b"runserver" in cmdline):
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return float("nan")


def one_start(var: Path, log: Path, root: Path = ROOT) -> tuple[float, float]:
    """Seconds from ``bin/run`` to the ready curl's first 200, and the web process's CPU."""
    port, proxy_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env.update(
        CONTEXTSVC_VAR_DIR=str(var),
        DATABASE_URL=f"sqlite:///{var / 'contextsvc.sqlite3'}",
        PORT=str(port),
        CONTEXTSVC_PROXY_PORT=str(proxy_port),
        DEBUG="false",
    )
    started = time.monotonic()
    with log.open("ab") as out:
        run = subprocess.Popen(
            ["bin/run"], cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        while not _ready(port, var / "demo_key.txt"):
            if run.poll() is not None:
                sys.exit(f"bin/run exited ({run.returncode}); see {log}")
            if time.monotonic() - started > 300:
                sys.exit(f"no answer after 300 s; see {log}")
            time.sleep(0.05)
        return time.monotonic() - started, _web_cpu(run.pid)
    finally:
        os.killpg(run.pid, signal.SIGTERM)
        try:
            run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


def main() -> None:
    restarts = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    root = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else ROOT
    with tempfile.TemporaryDirectory(prefix="bench-start-") as scratch:
        var, log = Path(scratch) / "var", Path(scratch) / "run.log"
        first, cpu = one_start(var, log, root)
        print(f"first start (empty var folder): {first:.1f} s (web process CPU {cpu:.1f} s)")
        times, cpus = [], []
        for _ in range(restarts):
            elapsed, cpu = one_start(var, log, root)
            times.append(elapsed)
            cpus.append(cpu)
            print(f"restart: {elapsed:.2f} s (web process CPU {cpu:.2f} s)", flush=True)
        print(
            f"restart median {statistics.median(times):.2f} s, "
            f"min {min(times):.2f} s, max {max(times):.2f} s ({restarts} restarts); "
            f"web process CPU median {statistics.median(cpus):.2f} s; "
            f"load average {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
