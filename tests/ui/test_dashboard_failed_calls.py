"""Failed model calls are marked in red wherever calls are listed, and in the REST API."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions.models import ContextCall, Session
from sessions.services.outcome import call_outcome_record
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


def _fail(call: ContextCall, **values) -> None:
    base = {"upstream_status": 529, "client_status": 529, "error_type": "overloaded_error"}
    call_outcome_record(
        call_id=call.pk,
        session_pk=call.session_id,
        values={**base, "error_message": "Overloaded", "failed": True, **values},
    )


def test_a_failed_call_is_red_in_the_table_the_card_the_detail_and_the_timeline(
    op, make_dash_session
):
    session = make_dash_session(turns=2, builds=True)
    first, second = ContextCall.objects.filter(session=session).order_by("pk")[:2]
    _fail(first)
    _fail(second, upstream_status=200, client_status=200, error_type="stream_cut",
          stream_cut=True, stream_events=7)  # fmt: skip
    assert Session.objects.get(pk=session.pk).failed_calls == 2
    card = op.get(reverse("dashboard:session_calls", args=[session.pk]), headers=HX)
    html = card.content.decode()
    assert html.count('class="call-failed-row"') == 2
    assert 'data-testid="failed-calls">2 failed' in html
    assert "failed 529" in html and "overloaded_error" in html
    assert "stream cut after 7 events" in html
    detail = op.get(reverse("dashboard:session_call", args=[session.pk, first.pk]), headers=HX)
    text = detail.content.decode()
    assert 'data-testid="call-outcome"' in text and "call-failed" in text
    assert "Overloaded" in text and "client got 529" in text
    page = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    assert 'data-testid="timeline-failed">2 model calls failed upstream' in page


def test_a_call_that_did_not_fail_has_no_mark(op, make_dash_session):
    session = make_dash_session(turns=1, builds=True)
    call = ContextCall.objects.get(session=session)
    call_outcome_record(
        call_id=call.pk, session_pk=session.pk, values={"upstream_status": 200, "failed": False}
    )
    html = op.get(reverse("dashboard:session_calls", args=[session.pk]), headers=HX)
    assert "call-failed-row" not in html.content.decode()
    assert Session.objects.get(pk=session.pk).failed_calls == 0


def test_the_api_call_representation_carries_the_outcome(alice, make_dash_session):
    session = make_dash_session(sid="api-1", turns=1, builds=True)
    call = ContextCall.objects.get(session=session)
    _fail(call, stream_cut=True, stream_events=3, ttfb_ms=12.5, total_ms=40.0)
    item = alice.get("sessions/api-1/calls").json()["items"][0]
    assert {k: item[k] for k in ("upstream_status", "client_status", "failed", "retries")} == {
        "upstream_status": 529,
        "client_status": 529,
        "failed": True,
        "retries": 0,
    }
    assert (item["error_type"], item["error_message"]) == ("overloaded_error", "Overloaded")
    assert (item["stream_cut"], item["stream_events"], item["ttfb_ms"]) == (True, 3, 12.5)
