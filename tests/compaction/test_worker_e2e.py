"""End to end with a real ``celery worker`` process on Redis, against the test database.

The worker is a subprocess, so it needs committed rows (``transactional_db``)
and the same database by name: pytest-django's ``test_<name>`` on PostgreSQL.
SQLite test databases live in memory, so these tests need PostgreSQL too.
Locally they skip without ``REDIS_URL`` / a PostgreSQL ``DATABASE_URL``; in CI
(``CI=true``) that is a failure, never a skip.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings as django_settings
from django.db import connection

from compaction.models import CompactionRun, Snapshot
from sessions.models import Session
from tests.conftest import IN_CI
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import SMALL, turn

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]


def _require_services() -> str:
    redis_url = os.environ.get("REDIS_URL")
    problems = []
    if not redis_url:
        problems.append("REDIS_URL is not set")
    if connection.vendor != "postgresql":
        problems.append("the test database is not PostgreSQL (SQLite test databases are in memory)")
    if problems:
        reason = "real-worker test needs " + " and ".join(problems)
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return redis_url


def _test_database_url() -> str:
    s = connection.settings_dict
    user = quote(s.get("USER") or "", safe="")
    password = quote(s.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    return f"postgres://{auth}{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


class Worker:
    """``celery -A contextsvc worker`` on its own queue, prefork with one child."""

    def __init__(self, tmp_path: Path, queue: str, env: dict[str, str]) -> None:
        self.log_path = tmp_path / f"worker-{queue}.log"
        self.queue = queue
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> Worker:
        log = self.log_path.open("ab")
        cmd = [
            sys.executable, "-m", "celery", "-A", "contextsvc", "worker",
            "--pool=prefork", "--concurrency=1", "--loglevel=INFO", "-Q", self.queue,
            "-n", f"{self.queue}@%h", "--without-gossip", "--without-mingle",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited early:\n{self.log()}")
            if " ready." in self.log():
                return self
            time.sleep(0.2)
        raise AssertionError(f"worker not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def child_pids(self) -> list[int]:
        assert self.proc is not None
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def worker_env(transactional_db, tmp_path, settings, monkeypatch):
    """Environment for a worker on this test's database and a queue of its own."""
    redis_url = _require_services()
    queue = f"compaction-e2e-{uuid.uuid4().hex[:8]}"
    settings.CONTEXTSVC_COMPACTION_QUEUE = queue
    env = {
        **os.environ,
        "DATABASE_URL": _test_database_url(),
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "CONTEXTSVC_VAR_DIR": str(tmp_path / "var"),
        "CONTEXTSVC_SUMMARIZER": "offline",
        "ANTHROPIC_API_KEY": "",
        "PYTHONUNBUFFERED": "1",
    }
    return tmp_path, queue, env


@pytest.fixture
def start_worker(worker_env):
    workers: list[Worker] = []
    tmp_path, queue, env = worker_env

    def _start(**extra_env: str) -> Worker:
        worker = Worker(tmp_path, queue, {**env, **extra_env}).start()
        workers.append(worker)
        return worker

    yield _start
    # Stopped before transactional_db flushes the tables (fixture order).
    for worker in workers:
        worker.stop()
    _forget_queue(env["REDIS_URL"], queue)


def _forget_queue(redis_url: str, queue: str) -> None:
    """Remove the per-test queue and kombu's binding keys from Redis."""
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = [queue, *client.scan_iter(match=f"_kombu.binding*{queue}")]
    client.delete(*keys)


def _wait_for_run(
    session: Session, *, timeout: float = 60, worker: Worker | None = None
) -> CompactionRun:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = CompactionRun.objects.filter(session=session).order_by("-created_at").first()
        if run is not None and run.is_finished:
            return run
        time.sleep(0.2)
    raise AssertionError(f"no finished run after {timeout}s\n{worker.log() if worker else ''}")


def test_worker_compacts_after_guard_reaches_compact(alice, alice_key, start_worker):
    worker = start_worker()
    response = alice.post("sessions", {**SMALL, "id": "e2e-worker"})
    assert response.status_code == 201, response.content
    status, t = "ok", 0
    while status == "ok":
        response = alice.post("sessions/e2e-worker/messages", {"messages": turn(t)})
        assert response.status_code == 200, response.content
        status = response.json()["budget"]["guard"]["status"]
        t += 1
    before = alice.get("sessions/e2e-worker/context").json()["budget"]["used"]
    session = Session.objects.get(owner=alice_key[0], external_id="e2e-worker")
    run = _wait_for_run(session, worker=worker)
    assert run.trigger == "auto" and run.status == "succeeded", (run.error, worker.log())
    assert run.celery_task_id and run.timings["queue_ms"] is not None
    # The snapshot and the smaller context.
    snapshot = Snapshot.objects.get(run=run)
    resume = alice.get("sessions/e2e-worker/snapshot").json()
    assert resume["snapshot"]["id"] == snapshot.pk
    context = alice.get("sessions/e2e-worker/context").json()
    assert context["budget"]["used"] < before
    assert context["budget"]["guard"]["status"] == "ok"
    assert alice.get(f"compactions/{run.pk}").json()["result"]["after_tokens"] < run.before_tokens


def test_worker_killed_mid_run_leaves_session_unchanged_and_run_is_retried(
    alice, alice_key, start_worker
):
    with FakeAnthropic(api_key="test-key", delay=3.0) as fake:
        worker = start_worker(
            CONTEXTSVC_SUMMARIZER="auto",
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=fake.base_url,
            CONTEXTSVC_SUMMARIZER_MAX_RETRIES="0",
        )
        assert alice.post("sessions", {**SMALL, "id": "e2e-kill"}).status_code == 201
        for t in range(5):
            alice.post("sessions/e2e-kill/messages", {"messages": turn(t)})
        session = Session.objects.get(owner=alice_key[0], external_id="e2e-kill")
        before_row = Session.objects.filter(pk=session.pk).values().get()
        before_ctx = alice.get("sessions/e2e-kill/context", format="raw").json()["messages"]

        response = alice.post("sessions/e2e-kill/compact", {"strategy": "summarize"})
        assert response.status_code == 202
        run_id = response.json()["run_id"]
        deadline = time.monotonic() + 30
        while not fake.messages_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.messages_requests(), worker.log()
        # The worker's child is inside the LLM call: kill it.
        (child,) = worker.child_pids()
        os.kill(child, signal.SIGKILL)
        time.sleep(0.5)
        assert Session.objects.filter(pk=session.pk).values().get() == before_row
        assert alice.get("sessions/e2e-kill/context", format="raw").json()["messages"] == before_ctx
        assert CompactionRun.objects.get(pk=run_id).status == "running"
        assert not Snapshot.objects.filter(session=session).exists()

        # reject_on_worker_lost requeues the message; the same task id takes the run over.
        run = _wait_for_run(session, worker=worker)
        assert run.status == "succeeded", (run.error, worker.log())
        assert run.attempts == 2
        assert len(fake.messages_requests()) == 2
        assert Snapshot.objects.filter(session=session).count() == 1
