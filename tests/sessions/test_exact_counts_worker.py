"""The exact count of an estimated message, end to end: the append enqueues it on
commit to Redis, a real ``celery worker`` counts it, the message and the
session's counters end up as a recount says. Needs Redis and PostgreSQL (the
worker is another process on the test database); in CI a failure, never a skip.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from django.conf import settings as django_settings

from sessions.models import Message, Session
from tests.compaction.test_worker_e2e import Worker, _forget_queue, redis_url
from tests.live_server import database_url
from tests.sessions.test_exact_counts import DENSE, WINDOW, exact_of, post, recount

pytestmark = [pytest.mark.needs_worker]


@pytest.fixture
def worker(transactional_db, tmp_path, settings):
    queue = f"counts-e2e-{uuid.uuid4().hex[:8]}"
    settings.CONTEXTSVC_TOKEN_COUNT_QUEUE = queue
    settings.CONTEXTSVC_EXACT_TOKEN_CHARS = 10_000
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url(),
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "CONTEXTSVC_VAR_DIR": str(tmp_path / "var"),
        "CONTEXTSVC_TOKEN_COUNT_QUEUE": queue,
        "PYTHONUNBUFFERED": "1",
    }
    started = Worker(tmp_path, queue, env).start()
    yield started
    started.stop()
    _forget_queue(redis_url(), queue)


def test_worker_replaces_the_estimate_with_the_exact_count(worker, alice, make_session):
    sid = make_session(id="counted-by-worker", **WINDOW)["id"]
    post(alice, sid, [{"role": "user", "content": "Read this"}])
    body = post(alice, sid, [{"role": "user", "content": DENSE}])
    big = body["messages"][0]
    assert big["token_count_estimated"]
    session = Session.objects.get(external_id=sid)

    deadline = time.monotonic() + 60
    row = Message.objects.get(session=session, seq=big["seq"])
    while row.token_count_estimated and time.monotonic() < deadline:
        time.sleep(0.2)
        row.refresh_from_db()
    assert not row.token_count_estimated, worker.log()
    assert row.token_count == exact_of(session.pk, big["seq"]) < big["token_count"]
    session.refresh_from_db()
    assert session.conversation_tokens == recount(session)
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["components"]["conversation"] == recount(session)
    assert "sessions.count_exact_tokens" in worker.log()
