"""The inspector of a session with many call records runs the
same number of queries as that of a small one (page, every partial, the
context tab), and the chart's largest build per bar, chosen by the database,
is the one a pass over every record chooses."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions.dashboard.selectors import usage
from sessions.models import ContextCall
from tests.ui.conftest import HX, build_session

pytestmark = pytest.mark.django_db


def _queries(client, url: str, headers: dict) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, headers=headers)
    assert response.status_code == 200, (url, response.status_code)
    return len(ctx)


@pytest.fixture
def small_and_large(alice_key):
    small = build_session(alice_key[0], sid="q-small", turns=2, tool_lines=3, builds=True)
    large = build_session(
        alice_key[0], sid="q-large", turns=40, calls_per_turn=2, tool_lines=3, builds=True
    )
    # More records than bars and than a page of the calls table.
    first = ContextCall.objects.filter(session=large).first()
    ContextCall.objects.bulk_create(
        [
            ContextCall(
                session=large,
                format="anthropic",
                model=first.model,
                guard_status="ok",
                through_seq=1 + i % large.last_seq,
                estimated_input=1_000 + i,
                components=first.components,
                breakdown=first.breakdown,
                cost_usd=0.01,
            )
            for i in range(300)
        ]
    )
    assert large.message_count > 10 * small.message_count
    assert (
        ContextCall.objects.filter(session=large).count()
        > 100 * ContextCall.objects.filter(session=small).count()
    )
    return small, large


PAGES = [
    ("session_detail", "", {}),
    ("session_budget", "", HX),
    ("session_usage", "", HX),
    ("session_calls", "", HX),
    ("session_timeline", "", HX),
    ("session_context", "?format=anthropic", HX),
    ("session_context", "?format=openai", HX),
    ("session_context", "?format=anthropic&start=0", HX),
    ("session_call_at", "?turn=2", HX),
    ("compaction_history", "", HX),
    ("session_policy", "", {}),
]


def test_the_inspector_runs_a_constant_number_of_queries_whatever_the_size(
    op, small_and_large, django_assert_max_num_queries
):
    small, large = small_and_large
    for name, query, headers in PAGES:
        counts = [
            _queries(op, reverse(f"dashboard:{name}", args=[s.pk]) + query, headers)
            for s in (small, large)
        ]
        assert counts[0] == counts[1], (name, query, counts)
    # The page: header, budget, timeline, chart (window events, messages,
    # reports, the largest build per bar and its components), calls card, panels.
    with django_assert_max_num_queries(20):
        op.get(reverse("dashboard:session_detail", args=[large.pk]))
    with django_assert_max_num_queries(9):
        op.get(reverse("dashboard:session_usage", args=[large.pk]), headers=HX)
    with django_assert_max_num_queries(6):
        op.get(reverse("dashboard:session_context", args=[large.pk]), headers=HX)


@pytest.mark.needs_postgres
def test_the_largest_build_per_bar_is_the_one_a_pass_over_every_record_chooses(
    small_and_large, monkeypatch
):
    _, large = small_and_large
    # Ties: equal estimates in one bar, the newest must be drawn.
    last = ContextCall.objects.filter(session=large).latest("id")
    ContextCall.objects.bulk_create(
        [
            ContextCall(
                session=large,
                format="anthropic",
                model=last.model,
                guard_status="ok",
                through_seq=last.through_seq,
                estimated_input=10**6,
                components={"conversation": 10**6 - i},
            )
            for i in range(3)
        ]
    )
    by_database = usage.usage_over_turns(large)
    assert connection.vendor == "postgresql"
    with monkeypatch.context() as m:
        m.setattr(connection, "vendor", "sqlite")  # the pass in Python
        by_python = usage.usage_over_turns(large)
    assert by_database.recorded == by_python.recorded > 10
    drawn = [(b.first_seq, b.call_id, b.calls, b.total) for b in by_database.bars]
    assert drawn == [(b.first_seq, b.call_id, b.calls, b.total) for b in by_python.bars]
    newest = ContextCall.objects.filter(session=large).latest("id")
    assert newest.pk in {b.call_id for b in by_database.bars}
