"""The check after every append stops at one statement when an automatic request would find
nothing to do (``selectors.auto_waits``): the breaker is open, or a run is under way with a
live lease. Whenever it says so, ``compaction_auto_request`` indeed writes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from compaction import selectors
from compaction.models import CompactionRun, CompactionState
from compaction.services.hooks import on_session_activity
from compaction.services.requests import compaction_auto_request
from sessions import status

pytestmark = pytest.mark.django_db

NOW = timezone.now


def runs(session) -> list[tuple]:
    return list(
        CompactionRun.objects.filter(session=session)
        .order_by("pk")
        .values_list("pk", "status", "trigger", "lease_expires_at", "celery_task_id")
    )


def run(session, *, trigger="auto", state="queued", lease: float | None = 60.0) -> None:
    expires = None if lease is None else NOW() + timedelta(seconds=lease)
    CompactionRun.objects.create(
        session=session,
        trigger=trigger,
        status=state,
        reason={"kind": "threshold"},
        lease_expires_at=expires,
    )


def failures(session, n: int) -> None:
    CompactionState.objects.update_or_create(session=session, defaults={"consecutive_failures": n})


STATES = {
    "nothing": ([], False),
    "breaker open": ([lambda s: failures(s, 3)], True),
    "two failures": ([lambda s: failures(s, 2)], False),
    "queued, live lease": ([lambda s: run(s)], True),
    "queued, no lease yet": ([lambda s: run(s, lease=None)], True),
    "running, live lease": ([lambda s: run(s, state="running")], True),
    "queued, lease lapsed": ([lambda s: run(s, lease=-5)], False),
    "an emergency run only": ([lambda s: run(s, trigger="emergency", state="running")], False),
    "finished runs only": ([lambda s: run(s, state="succeeded", lease=-5)], False),
    "a finished run, then a live one": (
        [lambda s: run(s, state="failed", lease=-5), lambda s: run(s)],
        True,
    ),
}


@pytest.mark.parametrize("name", list(STATES))
def test_auto_waits_only_when_an_automatic_request_writes_nothing(session_factory, name):
    steps, waits = STATES[name]
    session = session_factory(2, policy={"compaction": {"auto": False}})  # no hook's own runs
    for step in steps:
        step(session)
    before = runs(session)
    assert selectors.auto_waits(session) is waits
    compaction_auto_request(session=session, reason={"kind": "threshold"})
    if waits:
        assert runs(session) == before  # nothing created, requeued or changed
    else:
        assert runs(session) != before  # a run was created, or a lapsed one requeued


def test_while_a_run_waits_a_due_check_after_an_append_is_one_statement(session_factory, settings):
    settings.CONTEXTSVC_AUTO_COMPACT = True
    session = session_factory(2)
    state = status.refresh_guard(session)
    with CaptureQueriesContext(connection) as queries:
        on_session_activity(session, state, "usage")  # nothing due: nothing read
    assert queries.captured_queries == []
    run(session)
    before = runs(session)
    with CaptureQueriesContext(connection) as queries:
        on_session_activity(session, state, "tool_overflow")  # due at once (its reason reads)
    of_runs = [q["sql"][:120] for q in queries if "compaction_" in q["sql"]]
    assert len(of_runs) == 1, of_runs  # the breaker and the run under way, together
    assert runs(session) == before
    CompactionRun.objects.filter(session=session).update(status="succeeded")
    on_session_activity(session, state, "tool_overflow")  # no run under way: one is asked for
    assert CompactionRun.objects.filter(session=session, status="queued").count() == 1
