"""The recall index written in the background: an append schedules its session's
index task, eagerly here and through a real ``celery worker`` on Redis below."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from django.conf import settings as django_settings

from sessions.models import RecallSegment, RecallState, Session
from sessions.recall import index
from sessions.tasks import recall_index_session
from tests.compaction.test_worker_e2e import Worker, _forget_queue, redis_url
from tests.conftest import tool_turn
from tests.live_server import database_url


def post(client, sid: str, messages: list[dict]) -> None:
    response = client.post(f"sessions/{sid}/messages", {"messages": messages})
    assert response.status_code == 200, response.content


@pytest.mark.django_db
def test_appends_schedule_one_task_per_delay_and_it_indexes_eagerly(
    alice, make_session, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.CONTEXTSVC_RECALL_INDEX_DELAY = 30
    sent: list[tuple[str, list, int]] = []
    monkeypatch.setattr(
        index.celery_app,
        "send_task",
        lambda name, args, countdown, **kwargs: sent.append((name, args, countdown)),
    )
    monkeypatch.setattr(index, "_scheduled", {})
    sid = make_session()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        for step in range(3):
            post(alice, sid, tool_turn(f"c{step}", f"output of step {step}: token-{step}\n"))
    pk = Session.objects.get(external_id=sid).pk
    assert sent == [(index.INDEX_TASK, [pk], 30)]  # three appends, one task
    assert not RecallSegment.objects.filter(session_id=pk).exists()
    recall_index_session.apply(args=[pk])  # what the worker runs, eagerly
    assert RecallState.objects.get(session_id=pk).indexed_seq == 6
    texts = set(
        RecallSegment.objects.filter(session_id=pk, source="output").values_list("text", flat=True)
    )
    assert texts == {f"output of step {s}: token-{s}\n" for s in range(3)}


def test_a_broker_outage_does_not_fail_the_append(alice, make_session, settings, monkeypatch, db):
    settings.CONTEXTSVC_RECALL_INDEX_DELAY = 5
    monkeypatch.setattr(index, "_scheduled", {})

    def down(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(index.celery_app, "send_task", down)
    sid = make_session()["id"]
    post(alice, sid, [{"role": "user", "content": "still stored"}])
    assert Session.objects.get(external_id=sid).last_seq == 1


@pytest.mark.needs_worker
def test_a_real_worker_indexes_the_session_after_its_appends(
    transactional_db, tmp_path, settings, alice, make_session, monkeypatch
):
    queue = f"recall-e2e-{uuid.uuid4().hex[:8]}"
    settings.CONTEXTSVC_RECALL_INDEX_DELAY = 1
    settings.CONTEXTSVC_TOKEN_COUNT_QUEUE = queue
    monkeypatch.setattr(index, "_scheduled", {})
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url(),
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "CONTEXTSVC_VAR_DIR": str(tmp_path / "var"),
        "PYTHONUNBUFFERED": "1",
    }
    worker = Worker(tmp_path, queue, env).start()
    try:
        sid = make_session()["id"]
        post(alice, sid, tool_turn("c1", "the worker indexes marker-7781\n"))
        pk = Session.objects.get(external_id=sid).pk
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = RecallState.objects.filter(session_id=pk).first()
            if state is not None and state.indexed_seq == 2:
                break
            time.sleep(0.2)
        assert state is not None and state.indexed_seq == 2, worker.log()
        assert RecallSegment.objects.filter(session_id=pk, text__contains="marker-7781").exists()
        assert "sessions.recall_index_session" in worker.log()
    finally:
        worker.stop()
        _forget_queue(redis_url(), queue)
