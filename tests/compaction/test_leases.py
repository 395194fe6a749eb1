"""Heartbeat leases: a run whose executor died is requeued or failed by whoever looks next.

In-process tests on the real database: the "dead worker" is a claim nobody
renews (the state a ``kill -9`` leaves behind). The real-worker version is in
test_worker_e2e.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from compaction import leases
from compaction.models import CompactionRun, CompactionState, Snapshot
from compaction.services.execute import _claim, compaction_execute
from compaction.services.requests import (
    compaction_auto_request,
    compaction_recover,
    compaction_request,
    compaction_requeue_stale,
)
from sessions.services.append import session_append_messages

from .conftest import turn
from .test_services import session_state

ROOT = Path(__file__).resolve().parents[2]


def _dead_claim(run: CompactionRun, *, lease_left: float = -1.0, task_id: str = "dead-worker"):
    """Claim ``run`` as a worker would, then leave ``lease_left`` seconds of lease
    and nobody to renew it (negative: already lapsed)."""
    claimed = _claim(run.pk, task_id)
    assert claimed is not None
    CompactionRun.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() + timedelta(seconds=lease_left)
    )
    run.refresh_from_db()
    return run


def _at_block(session_factory, sid: str, **fields):
    """A session whose guard says block."""
    session = session_factory(0, sid=sid, **fields)
    t = 0
    while session.guard_status in ("ok", "compact"):
        if session.guard_status == "ok":
            messages = turn(t)
        else:  # small steps from compact to block, so as not to jump to final
            messages = [
                {"role": "user", "content": f"step {t}"},
                {"role": "assistant", "content": "noted " * 60},
            ]
        session_append_messages(session=session, messages=messages)
        session.refresh_from_db()
        t += 1
        assert t < 200, session.guard_status
    assert session.guard_status == "block"
    return session


def _auto_run(session) -> CompactionRun:
    """The automatic run the append hook queued (it runs on commit), or one like it."""
    run = CompactionRun.objects.filter(session=session, status="queued").first()
    return (
        run
        or compaction_request(
            session=session, trigger="auto", reason={"kind": "threshold"}, enqueue=False
        )[0]
    )


# --- the lease and its heartbeat ---------------------------------------------------------------


def test_claim_takes_a_short_lease(session_factory, settings):
    settings.CONTEXTSVC_COMPACTION_LEASE_SECONDS = 15
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    before = timezone.now()
    claimed, _ = _claim(run.pk, "w1")
    left = (claimed.lease_expires_at - before).total_seconds()
    assert 14 <= left <= 16


def test_heartbeat_renews_the_lease_until_superseded(transactional_db, session_factory, settings):
    settings.CONTEXTSVC_COMPACTION_LEASE_SECONDS = 3  # a beat every second
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    claimed, attempt = _claim(run.pk, "w1")
    first = claimed.lease_expires_at
    with leases.Heartbeat(run.pk, attempt) as beat:
        deadline = time.monotonic() + 20
        while beat.beats < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert beat.beats >= 2
    renewed = CompactionRun.objects.get(pk=run.pk).lease_expires_at
    assert renewed > first
    # Another executor took the run over: the old holder's beat stops renewing it.
    CompactionRun.objects.filter(pk=run.pk).update(attempts=attempt + 1)
    assert leases.Heartbeat(run.pk, attempt).renew() is False
    assert CompactionRun.objects.get(pk=run.pk).lease_expires_at == renewed


def test_lapsed_and_stalled(session_factory, settings):
    settings.CONTEXTSVC_COMPACTION_LEASE_SECONDS = 12
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    run = _dead_claim(run, lease_left=11)
    assert not leases.lapsed(run) and not leases.stalled(run)
    run.lease_expires_at = timezone.now() + timedelta(seconds=2)  # two beats missed
    assert not leases.lapsed(run) and leases.stalled(run)
    run.lease_expires_at = timezone.now() - timedelta(seconds=1)
    assert leases.lapsed(run)
    run.status = "succeeded"
    assert not leases.lapsed(run) and not leases.stalled(run)


# --- recovery by whoever looks ------------------------------------------------------------------


def test_lapsed_run_is_requeued_under_a_new_task_id(
    session_factory, enqueued, django_capture_on_commit_callbacks
):
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="auto", reason={"kind": "threshold"}, enqueue=False
    )
    run = _dead_claim(run)
    before = session_state(session)
    with django_capture_on_commit_callbacks(execute=True):
        assert compaction_recover(run) is True
    assert run.status == "queued" and run.celery_task_id != "dead-worker"
    assert enqueued == [(str(run.pk), run.celery_task_id)]
    assert session_state(session) == before
    # The new message runs it; the dead worker's message, redelivered later,
    # finds it held under another id and leaves it alone.
    new_holder = _claim(run.pk, run.celery_task_id)
    assert new_holder is not None
    assert compaction_execute(run_id=run.pk, task_id="dead-worker").status == "running"
    assert compaction_recover(run) is False  # alive: nothing to do


def test_run_lost_too_often_fails_and_leaves_the_session_unchanged(session_factory, settings):
    settings.CONTEXTSVC_COMPACTION_MAX_ATTEMPTS = 2
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="auto", reason={"kind": "threshold"}, enqueue=False
    )
    run = _dead_claim(run)
    assert compaction_recover(run) and run.status == "queued"
    run = _dead_claim(run)  # lost a second time
    before = session_state(session)
    assert compaction_recover(run) is True
    assert run.status == "failed" and run.error_code == "SERVICE_UNAVAILABLE"
    assert "lost 2 time(s)" in run.error and run.finished_at is not None
    assert session_state(session) == before
    assert not Snapshot.objects.filter(session=session).exists()
    # A failed auto run counts toward the circuit breaker like any other.
    assert CompactionState.objects.get(session=session).consecutive_failures == 1


def test_redelivered_message_of_a_run_lost_too_often_fails_it(session_factory, settings):
    settings.CONTEXTSVC_COMPACTION_MAX_ATTEMPTS = 1
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    run = _dead_claim(run, lease_left=10)
    before = session_state(session)
    # reject_on_worker_lost sends the same message again: no endless loop.
    done = compaction_execute(run_id=run.pk, task_id="dead-worker")
    assert done.status == "failed" and done.attempts == 1
    assert session_state(session) == before


def test_append_hook_recovers_a_lapsed_auto_run(session_factory, enqueued):
    session = session_factory(8)
    run = compaction_auto_request(session=session, reason={"kind": "threshold"})
    run = _dead_claim(run)
    assert compaction_auto_request(session=session, reason={"kind": "threshold"}).pk == run.pk
    run.refresh_from_db()
    assert run.status == "queued"


def test_requeue_stale_sweeps_every_lapsed_run(session_factory):
    first = session_factory(8, sid="sweep-a")
    second = session_factory(8, sid="sweep-b")
    runs = []
    for session in (first, second):
        run, _ = compaction_request(
            session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
        )
        runs.append(_dead_claim(run))
    live, _ = compaction_request(
        session=session_factory(8, sid="sweep-c"),
        trigger="manual",
        reason={"kind": "manual"},
        enqueue=False,
    )
    _dead_claim(live, lease_left=30)
    assert compaction_requeue_stale() == 2
    assert {r.status for r in CompactionRun.objects.filter(pk__in=[r.pk for r in runs])} == {
        "queued"
    }
    assert CompactionRun.objects.get(pk=live.pk).status == "running"


def test_worker_sweeper_recovers_without_beat(transactional_db, session_factory, enqueued):
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    run = _dead_claim(run)
    sweeper = leases.Sweeper(compaction_requeue_stale, 0.2).start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            run.refresh_from_db()
            if run.status == "queued":
                break
            time.sleep(0.1)
    finally:
        sweeper.stop()
    assert run.status == "queued"
    # (Earlier entries: the append hook's own enqueue, committed in this test.)
    assert enqueued[-1] == (str(run.pk), run.celery_task_id)


# --- the API never joins or waits on a dead run ----------------------------------------------


def _session_run(alice, session_factory, sid: str, *, lease_left: float = -1.0):
    session = session_factory(8, sid=sid)
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    return session, _dead_claim(run, lease_left=lease_left)


def test_post_compact_does_not_join_a_lapsed_run(
    alice, session_factory, enqueued, django_capture_on_commit_callbacks
):
    session, run = _session_run(alice, session_factory, "lapsed-post")
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post(f"sessions/{session.external_id}/compact", {})
    assert response.status_code == 202, response.content
    run.refresh_from_db()
    # Requeued and re-sent under a new task id: a worker runs it now.
    assert response.json()["run_id"] == str(run.pk) and response.json()["status"] == "queued"
    assert enqueued == [(str(run.pk), run.celery_task_id)]
    assert run.celery_task_id != "dead-worker"


def test_post_compact_wait_takes_a_lapsed_run_over(alice, session_factory):
    session, run = _session_run(alice, session_factory, "lapsed-wait")
    started = time.monotonic()
    response = alice.post(f"sessions/{session.external_id}/compact", {"wait": True})
    assert response.status_code == 200, response.content
    assert response.json()["run_id"] == str(run.pk) and response.json()["status"] == "succeeded"
    assert time.monotonic() - started < 60  # it ran; it did not sit out a wait
    run.refresh_from_db()
    assert run.attempts == 2 and Snapshot.objects.filter(run=run).exists()


def test_post_compact_wait_does_not_wait_for_a_stalled_run(alice, session_factory, settings):
    settings.CONTEXTSVC_COMPACTION_LEASE_SECONDS = 12
    settings.CONTEXTSVC_COMPACT_WAIT_SECONDS = 60
    session, run = _session_run(alice, session_factory, "stalled-wait", lease_left=2)
    started = time.monotonic()
    response = alice.post(f"sessions/{session.external_id}/compact", {"wait": True})
    elapsed = time.monotonic() - started
    # Its holder stopped beating: answered as it is, not after the 60 s wait.
    assert response.status_code == 202 and response.json()["status"] == "running"
    assert elapsed < 10, elapsed


def test_post_compact_starts_fresh_when_the_lapsed_run_is_failed(alice, session_factory, settings):
    settings.CONTEXTSVC_COMPACTION_MAX_ATTEMPTS = 1
    session, run = _session_run(alice, session_factory, "lapsed-fresh")
    before = session_state(session)
    response = alice.post(f"sessions/{session.external_id}/compact", {})
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["run_id"] != str(run.pk) and body["joined"] is False
    run.refresh_from_db()
    assert run.status == "failed"
    assert session_state(session) == before


def test_get_compaction_reports_a_lapsed_run_requeued(alice, session_factory):
    session, run = _session_run(alice, session_factory, "lapsed-get")
    body = alice.get(f"compactions/{run.pk}").json()
    assert body["status"] == "queued"


def test_get_context_answers_within_the_bound_while_a_dead_run_holds_block(
    alice, session_factory, settings
):
    """The holder died a moment ago: its lease is still live, so the request
    cannot know yet; it waits the bound at most, then answers with what it has."""
    settings.CONTEXTSVC_COMPACTION_LEASE_SECONDS = 60
    settings.CONTEXTSVC_CONTEXT_WAIT_SECONDS = 2
    session = _at_block(session_factory, "dead-block")
    run = _auto_run(session)
    _dead_claim(run, lease_left=58)
    before = session_state(session)
    started = time.monotonic()
    response = alice.get(f"sessions/{session.external_id}/context")
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.content
    assert response.json()["budget"]["guard"]["status"] == "block"
    assert 2 <= elapsed < 10, elapsed  # the bound, plus a loaded CI box's margin
    assert session_state(session) == before
    assert CompactionRun.objects.get(pk=run.pk).status == "running"


def test_get_context_default_bound_is_at_most_five_seconds(settings):
    assert 0 < settings.CONTEXTSVC_CONTEXT_WAIT_SECONDS <= 5


def test_get_context_does_not_wait_for_a_stalled_run(alice, session_factory, settings):
    settings.CONTEXTSVC_COMPACTION_LEASE_SECONDS = 60
    settings.CONTEXTSVC_CONTEXT_WAIT_SECONDS = 5
    session = _at_block(session_factory, "stalled-block")
    run = _auto_run(session)
    _dead_claim(run, lease_left=5)  # two heartbeats missed
    started = time.monotonic()
    response = alice.get(f"sessions/{session.external_id}/context")
    elapsed = time.monotonic() - started
    assert response.json()["budget"]["guard"]["status"] == "block"
    assert elapsed < 4, elapsed


def test_get_context_answers_within_the_bound_while_a_slow_summary_goes_on(
    transactional_db, alice, session_factory, fake_anthropic, settings
):
    """The run is the request's own (queued, nobody holds it) but its summary
    call is slow: the answer comes within the bound, the run finishes behind it."""
    settings.CONTEXTSVC_CONTEXT_WAIT_SECONDS = 1
    fake_anthropic.delay = 4.0
    session = _at_block(
        session_factory, "slow-block", policy={"compaction": {"strategy": "summarize"}}
    )
    run = _auto_run(session)
    started = time.monotonic()
    response = alice.get(f"sessions/{session.external_id}/context")
    elapsed = time.monotonic() - started
    assert response.json()["budget"]["guard"]["status"] == "block"
    assert elapsed < 4, elapsed  # not the summary's 4 s
    deadline = time.monotonic() + 30
    while not run.is_finished and time.monotonic() < deadline:
        time.sleep(0.2)
        run.refresh_from_db()
    assert run.status == "succeeded" and run.summarizer, run.error
    assert len(fake_anthropic.messages_requests()) == 1
    body = alice.get(f"sessions/{session.external_id}/context").json()
    assert body["budget"]["guard"]["status"] != "block"


def test_get_context_takes_over_a_lapsed_run_and_answers_compacted(alice, session_factory):
    session = _at_block(session_factory, "lapsed-block")
    run = _auto_run(session)
    _dead_claim(run)
    response = alice.get(f"sessions/{session.external_id}/context")
    assert response.status_code == 200, response.content
    assert response.json()["budget"]["guard"]["status"] != "block"
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempts == 2


# --- settings --------------------------------------------------------------------------------


def _settings_in_subprocess(**env: str) -> subprocess.CompletedProcess:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CELERY_BROKER_TRANSPORT_OPTIONS.get('visibility_timeout'), "
        "s.CELERY_TASK_TIME_LIMIT, s.CONTEXTSVC_COMPACTION_LEASE_SECONDS, "
        "s.CONTEXTSVC_CONTEXT_WAIT_SECONDS)"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTSVC_", "CELERY_"))}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "contextsvc.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_redis_visibility_timeout_follows_the_task_time_limit(tmp_path):
    done = _settings_in_subprocess(
        CELERY_BROKER_URL="redis://127.0.0.1:6379/15",
        CONTEXTSVC_TASK_TIME_LIMIT="900",
        CONTEXTSVC_VAR_DIR=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    visibility, limit, lease, wait = map(int, done.stdout.split())
    assert limit == 900 and limit < visibility <= limit + 120  # not Redis's hour
    assert lease == 10 and wait == 5


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONTEXTSVC_COMPACTION_LEASE_SECONDS", "soon"),
        ("CONTEXTSVC_COMPACTION_LEASE_SECONDS", "1"),
        ("CONTEXTSVC_COMPACTION_MAX_ATTEMPTS", "0"),
        ("CONTEXTSVC_CONTEXT_WAIT_SECONDS", "-1"),
        # Shorter than the time limit would hand a running task to a second worker.
        ("CONTEXTSVC_BROKER_VISIBILITY_TIMEOUT", "300"),
    ],
)
def test_bad_lease_settings_fail_loudly(tmp_path, name, value):
    done = _settings_in_subprocess(CONTEXTSVC_VAR_DIR=str(tmp_path), **{name: value})
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and name in done.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONTEXTSVC_AUTO_COMPACT", "maybe"),
        ("CONTEXTSVC_SUMMARIZER", "gpt"),
        ("CONTEXTSVC_SUMMARIZER_MAX_RETRIES", "-1"),
        ("CONTEXTSVC_SUMMARIZER_TIMEOUT", "0"),
        ("CONTEXTSVC_COMPACT_WAIT_SECONDS", "soon"),
    ],
)
def test_bad_compaction_settings_fail_loudly_at_start_up(tmp_path, name, value):
    done = _settings_in_subprocess(CONTEXTSVC_VAR_DIR=str(tmp_path), **{name: value})
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and name in done.stderr


def test_compaction_settings_are_read_once_from_the_environment(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CONTEXTSVC_AUTO_COMPACT, s.CONTEXTSVC_SUMMARIZER, "
        "s.CONTEXTSVC_SUMMARIZER_MAX_RETRIES, s.CONTEXTSVC_SUMMARIZER_TIMEOUT, "
        "s.CONTEXTSVC_COMPACTION_QUEUE, s.CONTEXTSVC_COMPACT_WAIT_SECONDS)"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTSVC_", "CELERY_"))}
    env = {
        "CONTEXTSVC_VAR_DIR": str(tmp_path),
        "CONTEXTSVC_AUTO_COMPACT": "off",
        "CONTEXTSVC_SUMMARIZER": "Offline",
        "CONTEXTSVC_SUMMARIZER_MAX_RETRIES": "0",
        "CONTEXTSVC_SUMMARIZER_TIMEOUT": "30",
        "CONTEXTSVC_COMPACTION_QUEUE": "compaction",
        "CONTEXTSVC_COMPACT_WAIT_SECONDS": "7",
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "contextsvc.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "offline", "0", "30", "compaction", "7"]
