"""End to end with a real ``celery worker`` process on Redis, against the test database.

The worker is a subprocess, so it needs committed rows (``transactional_db``)
and the same database by name: pytest-django's ``test_<name>`` on PostgreSQL.
SQLite test databases live in memory, so these tests need PostgreSQL too.
Locally they skip without ``REDIS_URL`` / a PostgreSQL ``DATABASE_URL``; in CI
(``CI=true``) that is a failure, never a skip.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from compaction.models import CompactionRun, Snapshot
from fakes.anthropic_server import FakeAnthropic
from fakes.openai_rules import validate_chat
from fakes.openai_server import FakeOpenAI
from sessions.models import Session
from tests.live_server import database_url, gunicorn

from .conftest import SMALL, turn

pytestmark = [pytest.mark.needs_worker]

ROOT = Path(__file__).resolve().parents[2]


def redis_url() -> str:
    """The broker the worker and the test share (the ``needs_worker`` mark makes sure of it)."""
    return os.environ["REDIS_URL"]


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
        # Its own process group, so a test can kill the whole worker at once
        # (parent and pool children), as an OOM kill or node loss would.
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
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

    def kill_group(self) -> None:
        """``kill -9`` the worker's whole process group: nothing gets to ack or clean up."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

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
    queue = f"compaction-e2e-{uuid.uuid4().hex[:8]}"
    settings.CONTEXTSVC_COMPACTION_QUEUE = queue
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url(),
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "CONTEXTSVC_VAR_DIR": str(tmp_path / "var"),
        "CONTEXTSVC_SUMMARIZER": "offline",
        # Runs a worker requeues (its lease sweep) go to this test's queue too.
        "CONTEXTSVC_COMPACTION_QUEUE": queue,
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
    """Remove the per-test queue, kombu's binding keys and the unacked messages a
    killed worker left for it from Redis."""
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = [queue, *client.scan_iter(match=f"_kombu.binding*{queue}")]
    client.delete(*keys)
    for tag, raw in client.hgetall("unacked").items():
        try:
            routing_key = json.loads(raw)[2]
        except (ValueError, IndexError, TypeError):
            continue
        if routing_key == queue:
            client.hdel("unacked", tag)
            client.zrem("unacked_index", tag)


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
    # The guard's tier triggers here, not the cost-aware planner (which would compact earlier).
    threshold = {"compaction": {"planner": "threshold"}}
    response = alice.post("sessions", {**SMALL, "id": "e2e-worker", "policy": threshold})
    assert response.status_code == 201, response.content
    status, t = "ok", 0
    while status == "ok":
        response = alice.post("sessions/e2e-worker/messages", {"messages": turn(t)})
        assert response.status_code == 200, response.content
        status = response.json()["budget"]["guard"]["status"]
        t += 1
    # What the append that reached the tier left (a fast worker may have compacted by now).
    before = response.json()["budget"]["used"]
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


def _summary_in_flight(alice, alice_key, sid: str, fake, worker):
    """A five-turn session whose summarize run is inside the (slow) LLM call:
    ``(session, its row before, its raw context before, run id)``."""
    assert alice.post("sessions", {**SMALL, "id": sid}).status_code == 201
    for t in range(5):
        alice.post(f"sessions/{sid}/messages", {"messages": turn(t)})
    session = Session.objects.get(owner=alice_key[0], external_id=sid)
    before_row = Session.objects.filter(pk=session.pk).values().get()
    before_ctx = alice.get(f"sessions/{sid}/context", format="raw").json()["messages"]
    response = alice.post(f"sessions/{sid}/compact", {"strategy": "summarize"})
    assert response.status_code == 202
    deadline = time.monotonic() + 30
    while not fake.messages_requests() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.messages_requests(), worker.log()
    return session, before_row, before_ctx, response.json()["run_id"]


def test_worker_summarises_through_the_openai_sdk(alice, alice_key, start_worker):
    """The openai summariser inside a real worker: the official SDK against a
    local Chat Completions server, its own retry of a 429 included."""
    with FakeOpenAI(api_key="test-key") as fake:
        worker = start_worker(
            CONTEXTSVC_SUMMARIZER="openai",
            CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY="test-key",
            CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL=f"{fake.base_url}/v1",
            CONTEXTSVC_SUMMARIZER_OPENAI_MODEL="gpt-fake-small",
            CONTEXTSVC_SUMMARIZER_MAX_RETRIES="1",
        )
        fake.fail_next(429)
        # The summariser's own request shape (not the session's cached prefix).
        legacy = {"compaction": {"summary_reuse_cache": False}}
        session_body = {**SMALL, "id": "e2e-openai", "policy": legacy}
        assert alice.post("sessions", session_body).status_code == 201
        for t in range(5):
            alice.post("sessions/e2e-openai/messages", {"messages": turn(t)})
        response = alice.post("sessions/e2e-openai/compact", {"strategy": "summarize"})
        assert response.status_code == 202, response.content
        session = Session.objects.get(owner=alice_key[0], external_id="e2e-openai")
        run = _wait_for_run(session, worker=worker)
        assert run.status == "succeeded", (run.error, worker.log())
        assert [r.status for r in fake.chat_requests()] == [429, 200]
        body = fake.chat_requests()[-1].body
        validate_chat(body)
        assert body["model"] == "gpt-fake-small" and body["messages"][0]["role"] == "system"
    detail = alice.get(f"compactions/{run.pk}").json()
    assert (detail["summarizer"], detail["model"]) == ("openai", "gpt-fake-small")
    session.refresh_from_db()
    assert session.summary.startswith("Fake reply to:")


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
        session, before_row, before_ctx, run_id = _summary_in_flight(
            alice, alice_key, "e2e-kill", fake, worker
        )
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


def test_whole_worker_killed_mid_run_is_recovered_by_the_next_worker_within_30s(
    alice, alice_key, start_worker, settings
):
    """kill -9 of the whole worker (parent and child) while the summariser call is in
    flight: no ack, no reject, the message sits in Redis's unacked set. A new
    worker's lease sweep requeues the run once its heartbeat lease lapsed, and
    the run completes within 30 s of the kill — no beat, no visibility timeout."""
    settings.CONTEXTSVC_COMPACTION_LEASE_SECONDS = 6
    with FakeAnthropic(api_key="test-key", delay=3.0) as fake:
        env = {
            "CONTEXTSVC_SUMMARIZER": "auto",
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": fake.base_url,
            "CONTEXTSVC_SUMMARIZER_MAX_RETRIES": "0",
            "CONTEXTSVC_COMPACTION_LEASE_SECONDS": "6",
        }
        worker = start_worker(**env)
        session, before_row, before_ctx, run_id = _summary_in_flight(
            alice, alice_key, "e2e-killpg", fake, worker
        )
        assert CompactionRun.objects.get(pk=run_id).status == "running"

        worker.kill_group()
        killed_at = time.monotonic()
        assert Session.objects.filter(pk=session.pk).values().get() == before_row
        assert CompactionRun.objects.get(pk=run_id).status == "running"

        second = start_worker(**env)
        while time.monotonic() - killed_at < 30:
            run = CompactionRun.objects.get(pk=run_id)
            if run.is_finished:
                break
            time.sleep(0.2)
        recovered_in = time.monotonic() - killed_at
        assert run.is_finished, f"still {run.status} 30 s after the kill\n{second.log()}"
        if run.status == "succeeded":
            # Consistent: one snapshot, the summary in the window, the context smaller.
            assert run.attempts == 2 and run.changed
            assert Snapshot.objects.filter(session=session).count() == 1
            session.refresh_from_db()
            assert session.summary and session.window_start_seq > before_row["window_start_seq"]
            after = alice.get("sessions/e2e-killpg/context", format="raw").json()["messages"]
            assert after != before_ctx and len(after) < len(before_ctx)
        else:
            assert Session.objects.filter(pk=session.pk).values().get() == before_row
            assert not Snapshot.objects.filter(session=session).exists()
        assert "lease lapsed" in second.log() or "recovered" in second.log(), second.log()
        print(f"run {run.status} {recovered_in:.1f} s after the worker was killed")


def test_concurrent_context_calls_answer_within_the_bound_while_a_dead_run_holds_block(
    alice_key, session_factory, worker_env, monkeypatch, settings
):
    """Six agents fetch the context of a session at block, on a real gunicorn,
    while the run that would unblock it belongs to a worker that just died (its
    lease not yet out). Each answers within the bound with the context it has;
    once the lease lapsed, the next call takes the run over and is unblocked."""
    from .test_leases import _at_block, _auto_run, _dead_claim

    tmp_path, queue, env = worker_env
    settings.CONTEXTSVC_COMPACTION_LEASE_SECONDS = 15
    for name in ("CONTEXTSVC_COMPACTION_QUEUE", "CONTEXTSVC_SUMMARIZER", "CONTEXTSVC_VAR_DIR"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")
    monkeypatch.setenv("GUNICORN_THREADS", "6")  # six requests at once on one worker
    session = _at_block(session_factory, "dead-block-live")
    run = _dead_claim(_auto_run(session), lease_left=10)  # its worker died ~5 s ago
    before = Session.objects.filter(pk=session.pk).values().get()
    path = f"sessions/{session.external_id}/context"
    server_env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DEBUG": "false",
        "WEB_CONCURRENCY": "1",
        # One key plays all six agents: no per-key thread share or rate here.
        "CONTEXTSVC_KEEP_THREAD_FREE": "false",
        "CONTEXTSVC_RATE_LIMIT": "off",
        "CONTEXTSVC_RATE_PACE": "off",
    }

    def get(port: int, url: str) -> tuple[int, bytes, float]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        started = time.perf_counter()
        conn.request("GET", f"/api/v1/{url}", headers={"Authorization": f"Bearer {alice_key[1]}"})
        response = conn.getresponse()
        body = response.read()
        conn.close()
        return response.status, body, time.perf_counter() - started

    try:
        with gunicorn(server_env, tmp_path / "gunicorn.log") as port:
            get(port, "openapi.json")  # warm up

            def fetch(_: int) -> tuple[int, str, float]:
                status, body, seconds = get(port, path)
                return status, json.loads(body)["budget"]["guard"]["status"], seconds

            with ThreadPoolExecutor(6) as pool:
                results = list(pool.map(fetch, range(6)))
            assert [r[:2] for r in results] == [(200, "block")] * 6, results
            slowest = max(r[2] for r in results)
            # The 5 s bound, plus a loaded 2-core CI box's margin (not 120 s).
            assert slowest < 5 + 10, results
            assert Session.objects.filter(pk=session.pk).values().get() == before
            print(f"six concurrent context calls at block: slowest {slowest:.2f} s")

            while CompactionRun.objects.get(pk=run.pk).lease_expires_at > timezone.now():
                time.sleep(0.2)
            status, body, _ = get(port, path)
            assert status == 200 and json.loads(body)["budget"]["guard"]["status"] != "block"
            run.refresh_from_db()
            assert run.status == "succeeded" and run.attempts == 2
    finally:
        _forget_queue(env["REDIS_URL"], queue)
