"""The sessions list: every key's sessions, filters, sort, pages, live partial."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions.models import Session
from tests.ui.conftest import HX, build_session

pytestmark = pytest.mark.django_db

LIST = reverse("dashboard:session_list")


def _bare_session(key, sid: str, **fields) -> Session:
    """A session row with set counters (the list reads only the row)."""
    from sessions.services.sessions import session_create

    session = session_create(
        owner=key,
        data={
            "id": sid,
            "model": "claude-sonnet-4-5",
            "context_window": 32_000,
            "max_output_tokens": 4_096,
            "buffer_tokens": 2_048,
            **fields.pop("data", {}),
        },
    )
    Session.objects.filter(pk=session.pk).update(**fields)
    return Session.objects.get(pk=session.pk)


def test_operators_see_every_keys_sessions(op, alice_key, bob_key):
    _bare_session(alice_key[0], "alice-run", agent="alice-bot")
    _bare_session(bob_key[0], "bob-run", agent="bob-bot")
    # The same external id under two keys: two rows, two distinct links.
    a = _bare_session(alice_key[0], "shared")
    b = _bare_session(bob_key[0], "shared")
    page = op.get(LIST).content.decode()
    assert "alice-run" in page and "bob-run" in page
    assert f'href="/sessions/{a.pk}/"' in page and f'href="/sessions/{b.pk}/"' in page


def test_row_shows_usage_status_count_and_activity(op, alice_key):
    # effective window = 32,000 - 4,096 - 2,048 = 25,856; 24,563 is 95 %.
    _bare_session(
        alice_key[0], "hot", used_tokens=24_563, guard_status="compact", message_count=321
    )
    page = op.get(LIST).content.decode()
    assert "95.0%" in page
    assert "badge-compact" in page
    assert "321" in page
    assert "just now" in page


def test_final_sessions_show_final_whatever_the_counters(op, alice_key):
    _bare_session(alice_key[0], "done", status="final", guard_status="ok")
    page = op.get(LIST).content.decode()
    assert "badge-final" in page and "badge-ok" not in page.split("<tbody>")[1]


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ({"q": "alpha"}, ["alpha-1"], ["beta-2"]),
        ({"agent": "builder"}, ["beta-2"], ["alpha-1"]),
        ({"status": "block"}, ["beta-2"], ["alpha-1"]),
        ({"status": "ok"}, ["alpha-1"], ["beta-2"]),
    ],
)
def test_filters(op, alice_key, query, shown, hidden):
    _bare_session(alice_key[0], "alpha-1", agent="planner", guard_status="ok")
    _bare_session(alice_key[0], "beta-2", agent="builder", guard_status="block")
    body = op.get(LIST, query, headers=HX).content.decode()
    for sid in shown:
        assert sid in body
    for sid in hidden:
        assert sid not in body


def test_filter_by_agent_key(op, alice_key, bob_key):
    _bare_session(alice_key[0], "of-alice")
    _bare_session(bob_key[0], "of-bob")
    page = op.get(LIST, {"key": bob_key[0].pk}).content.decode()
    assert "of-bob" in page and "of-alice" not in page
    assert "key bob" in page  # the filter chip


def test_sort_by_usage(op, alice_key):
    _bare_session(alice_key[0], "low", used_tokens=100)
    _bare_session(alice_key[0], "high", used_tokens=20_000)
    _bare_session(alice_key[0], "mid", used_tokens=5_000)
    body = op.get(LIST, {"sort": "usage"}, headers=HX).content.decode()
    assert body.index(">high</a>") < body.index(">mid</a>") < body.index(">low</a>")


def test_pages_of_25(op, alice_key):
    for i in range(30):
        _bare_session(alice_key[0], f"s-{i:02d}")
    first = op.get(LIST, {"sort": "id"}, headers=HX).content.decode()
    second = op.get(LIST, {"sort": "id", "page": 2}, headers=HX).content.decode()
    assert "s-00" in first and "s-24" in first and "s-25" not in first
    assert "s-25" in second and "s-29" in second and "s-00" not in second
    assert "1–25 of 30 sessions" in first and "Page 2 of 2" in second
    # The polling request carries the page it is on (hidden input inside the results).
    assert 'id="list-page" name="page" value="2"' in second


def test_bad_filter_values_fall_back_to_defaults(op, alice_key):
    _bare_session(alice_key[0], "x")
    response = op.get(LIST, {"status": "bogus", "sort": "nope", "page": "abc", "key": "z"})
    assert response.status_code == 200 and "x" in response.content.decode()


def test_htmx_request_gets_the_results_partial_only(op, alice_key):
    _bare_session(alice_key[0], "x")
    partial = op.get(LIST, headers=HX).content.decode()
    assert "<html" not in partial and "<tbody>" in partial
    page = op.get(LIST).content.decode()
    assert "<html" in page
    # The results container polls every 5 s and re-sends the filter form.
    assert 'hx-trigger="every 5s' in page and 'hx-include="#filters, #list-page"' in page


def test_empty_states(op, alice_key):
    assert "No sessions yet." in op.get(LIST).content.decode()
    _bare_session(alice_key[0], "x")
    body = op.get(LIST, {"q": "nothing-like-this"}, headers=HX).content.decode()
    assert "No session matches these filters." in body


def test_session_ids_are_escaped(op, alice_key):
    _bare_session(alice_key[0], "<b>x</b>", data={"agent": "<i>a</i>"})
    page = op.get(LIST).content.decode()
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page


def test_query_count_does_not_grow_with_sessions_or_messages(op, alice_key):
    build_session(alice_key[0], sid="one", turns=1)
    with CaptureQueriesContext(connection) as small:
        op.get(LIST)
    for i in range(12):
        _bare_session(alice_key[0], f"more-{i}", message_count=10_000)
    with CaptureQueriesContext(connection) as large:
        op.get(LIST)
    assert len(large) == len(small)
    with CaptureQueriesContext(connection) as partial:
        op.get(LIST, headers=HX)
    assert len(partial) <= len(large)
