"""A context build's record waits for the WAL flush unless the operator opts out
(``DB_BUILD_RECORD_SYNC_COMMIT=false``): durability is the default."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions.models import ContextCall

# Outside a test transaction: a caller's transaction keeps its own durability.
pytestmark = [pytest.mark.needs_postgres, pytest.mark.django_db(transaction=True)]

NO_FLUSH = "SET LOCAL synchronous_commit TO OFF"


def _build(alice, make_session, sid: str) -> list[str]:
    make_session(id=sid)
    posted = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]}
    )
    assert posted.status_code == 200, posted.content
    with CaptureQueriesContext(connection) as queries:
        built = alice.get(f"sessions/{sid}/context?format=anthropic")
    assert built.status_code == 200, built.content
    assert ContextCall.objects.filter(session__external_id=sid).count() == 1  # recorded
    return [q["sql"] for q in queries.captured_queries]


def test_the_record_waits_for_the_flush_by_default(alice, make_session):
    assert NO_FLUSH not in _build(alice, make_session, "durable")


def test_an_operator_can_trade_the_flush_for_a_millisecond(alice, make_session, settings):
    settings.DB_BUILD_RECORD_SYNC_COMMIT = False
    assert NO_FLUSH in _build(alice, make_session, "fast")
