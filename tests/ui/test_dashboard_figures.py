"""One set of figures: the session list, the inspector, the API's guard and the
badge read the same "used" (docs/dashboard.md#used)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from sessions import accounting, status
from sessions.dashboard.selectors.calls import session_cost
from sessions.dashboard.selectors.detail import budget_view
from sessions.models import Session

pytestmark = pytest.mark.django_db

LIST = reverse("dashboard:session_list")
NO_AUTO = {"compaction": {"auto": False}}


def _session(alice, make_session, sid: str, *, reported: int) -> Session:
    """A session with ~1,000 tokens of our estimate, then a call the provider
    reports at ``reported`` input tokens (usable window: 7,000)."""
    make_session(
        id=sid, context_window=8_000, max_output_tokens=1_000, buffer_tokens=0, policy=NO_AUTO
    )
    said = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "word " * 900}]},
    )
    assert said.status_code == 200, said.content
    assert alice.get(f"sessions/{sid}/context", purpose="call").status_code == 200
    usage = alice.post(f"sessions/{sid}/usage", {"input_tokens": reported, "output_tokens": 5})
    assert usage.status_code == 200, usage.content
    return Session.objects.get(external_id=sid)


def _list_row(op, sid: str) -> str:
    page = op.get(LIST).content.decode()
    rows = [r for r in page.split("<tr") if f">{sid}<" in r]
    assert len(rows) == 1, sid
    return rows[0]


def _figures(op, alice, session: Session) -> tuple[float, float, float, str, str]:
    api = alice.get(f"sessions/{session.external_id}/budget").json()
    projected = api["guard"]["projected"]
    guard_pct = status.used_pct(projected, status.usable_tokens(session))
    view = budget_view(session)
    row = _list_row(op, session.external_id)
    [list_pct] = re.findall(r'meter-label">([\d.]+)%', row)
    [list_badge] = re.findall(r'class="badge badge-(\w+)"', row)
    return float(list_pct), view.used_pct, guard_pct, list_badge, view.status


def test_reported_usage_above_our_estimate_is_the_one_used_figure(op, alice, make_session):
    session = _session(alice, make_session, "above-estimate", reported=5_000)
    state = accounting.compute_budget(session)
    assert state.estimated < 2_000 < state.guard.projected  # the provider counted far more
    list_pct, inspector_pct, guard_pct, list_badge, inspector_badge = _figures(op, alice, session)
    assert list_pct == inspector_pct == guard_pct
    assert guard_pct == status.used_pct(state.guard.projected, 7_000) > 70
    assert budget_view(session).used == state.guard.projected == session.used_tokens
    assert list_badge == inspector_badge == "ok"  # 71 % is under compact (95 %)
    page = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    assert f"{state.guard.projected:,}" in page and f"{state.estimated:,}" in page


def test_a_session_over_100_percent_never_shows_ok(op, alice, make_session):
    session = _session(alice, make_session, "over-full", reported=7_600)
    list_pct, inspector_pct, guard_pct, list_badge, inspector_badge = _figures(op, alice, session)
    assert list_pct == inspector_pct == guard_pct > 100
    assert list_badge == inspector_badge
    assert list_badge in ("block", "final")


def test_a_stale_row_over_100_percent_gets_a_block_badge_not_ok(op, alice, make_session):
    # A row written before "used" meant the guard's figure: counters say 116 %,
    # the stored verdict says ok. The badge follows the figure shown beside it.
    make_session(id="stale", context_window=8_000, max_output_tokens=1_000, buffer_tokens=0)
    Session.objects.filter(external_id="stale").update(used_tokens=8_120, guard_status="ok")
    row = _list_row(op, "stale")
    assert 'meter-label">116.0%' in row
    assert 'badge badge-block"' in row and "badge-ok" not in row


def test_badge_levels_follow_the_thresholds_of_used(alice, make_session):
    make_session(id="levels", context_window=8_000, max_output_tokens=1_000, buffer_tokens=0)
    session = Session.objects.get(external_id="levels")
    session.guard_status = "ok"
    compact_at = accounting.thresholds_of(session).compact_at(7_000)
    block_at = accounting.thresholds_of(session).block_at(7_000)
    assert status.badge_status(session, compact_at - 1) == "ok"
    assert status.badge_status(session, compact_at) == "compact"
    assert status.badge_status(session, block_at) == "block"
    session.guard_status = "final"
    assert status.badge_status(session, 10) == "final"  # a stored verdict never goes down


# --- cost: the sum of priced calls, labelled reported / estimated ---------------------


def test_cost_is_the_priced_calls_labelled_estimated_then_reported(op, alice, make_session):
    sid = "cost-basis"
    make_session(id=sid)
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]})
    for _ in range(3):  # reads: no call, no cost
        assert alice.get(f"sessions/{sid}/context", format="raw").status_code == 200
        assert alice.get(f"sessions/{sid}/context", purpose="read").status_code == 200
    assert alice.get(f"sessions/{sid}/calls").json()["items"] == []
    assert 'col-cost"><span class="muted">—' in _list_row(op, sid)

    assert alice.get(f"sessions/{sid}/context", purpose="call").status_code == 200
    [call] = alice.get(f"sessions/{sid}/calls").json()["items"]
    assert call["cost_basis"] == "estimated" and call["cost_usd"] > 0
    row = _list_row(op, sid)
    assert 'data-basis="estimated"' in row and "≈ " in row
    session = Session.objects.get(external_id=sid)
    assert session_cost(session).basis == "estimated"
    assert session_cost(session).cost == pytest.approx(call["cost_usd"])

    alice.post(f"sessions/{sid}/usage", {"input_tokens": 40, "output_tokens": 7})
    [call] = alice.get(f"sessions/{sid}/calls").json()["items"]
    assert call["cost_basis"] == "reported"
    row = _list_row(op, sid)
    assert 'data-basis="reported"' in row and "≈ " not in row
    card = op.get(reverse("dashboard:session_calls", args=[session.pk])).content.decode()
    assert 'data-basis="reported"> reported</span>' in card
    assert session_cost(session).cost == pytest.approx(call["cost_usd"])
