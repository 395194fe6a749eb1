"""One set of figures: the list, the inspector and the guard show the same usage,
and no badge says "ok" over 100 % (docs/dashboard.md#one-set-of-figures)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from sessions.models import Session
from sessions.services.sessions import session_create

pytestmark = pytest.mark.django_db

LIST = reverse("dashboard:session_list")
NO_AUTO = {"compaction": {"auto": False}}
USABLE = 32_000 - 4_096 - 2_048  # the make_session defaults: 25,856


def _figures(op, alice, sid: str) -> dict:
    budget = alice.get(f"sessions/{sid}/budget").json()
    session = Session.objects.get(external_id=sid)
    listing = op.get(LIST, {"q": sid}).content.decode().split("<tbody>")[1]
    inspector = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    header = inspector.split('class="card', 1)[0]  # the page header, before the first card
    return {
        "guard": budget["guard"],
        "list_pct": re.search(r'meter-label">([\d.]+)%', listing).group(1),
        "list_badge": re.search(r"badge badge-(\w+)", listing).group(1),
        "header_pct": re.search(r'meter-label">([\d.]+)%', header).group(1),
        "header_badge": re.search(r"badge badge-(\w+)", header).group(1),
    }


def _say(alice, sid: str, words: int) -> int:
    response = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "w " * words}]}
    )
    assert response.status_code == 200, response.content
    return response.json()["messages"][-1]["seq"]


def test_a_provider_count_over_the_window_is_no_ok_anywhere(op, alice, make_session):
    sid = make_session(id="over", policy=NO_AUTO)["id"]
    seq = _say(alice, sid, 50)  # our estimate: a few hundred tokens, "ok" by itself
    report = {"input_tokens": 31_000, "output_tokens": 10, "through_seq": seq}
    assert alice.post(f"sessions/{sid}/usage", report).status_code == 200
    figures = _figures(op, alice, sid)
    projected = figures["guard"]["projected"]
    assert projected > USABLE and figures["guard"]["status"] in ("block", "final")
    shown = f"{100 * projected / USABLE:.1f}"
    assert figures["list_pct"] == figures["header_pct"] == shown
    assert "ok" not in (figures["list_badge"], figures["header_badge"])
    assert figures["list_badge"] == figures["header_badge"]


def test_a_provider_count_under_our_estimate_is_the_figure_shown(op, alice, make_session):
    sid = make_session(id="under", policy=NO_AUTO)["id"]
    seq = _say(alice, sid, 9_000)  # our estimate: ~70 % of the usable window
    report = {"input_tokens": 2_000, "output_tokens": 10, "through_seq": seq}
    assert alice.post(f"sessions/{sid}/usage", report).status_code == 200
    figures = _figures(op, alice, sid)
    projected = figures["guard"]["projected"]
    assert projected < 0.2 * USABLE and figures["guard"]["status"] == "ok"
    shown = f"{100 * projected / USABLE:.1f}"
    assert figures["list_pct"] == figures["header_pct"] == shown
    assert figures["list_badge"] == figures["header_badge"] == "ok"


def test_a_stale_row_over_100_percent_never_shows_ok(op, alice_key):

    session = session_create(
        owner=alice_key[0],
        data={
            "id": "stale",
            "model": "claude-sonnet-4-5",
            "context_window": 32_000,
            "max_output_tokens": 4_096,
            "buffer_tokens": 2_048,
        },
    )
    Session.objects.filter(pk=session.pk).update(used_tokens=30_000, guard_status="ok")
    listing = op.get(LIST, {"q": "stale"}).content.decode().split("<tbody>")[1]
    assert "116.0%" in listing
    assert "badge-ok" not in listing and "badge-block" in listing
