"""Every dashboard page and partial: login required, staff only, CSRF on writes,
404 for ids that do not exist."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


def _urls(session_pk: int, seq: int = 1, ref: str = "out_x") -> list[str]:
    return [
        reverse("dashboard:session_list"),
        reverse("dashboard:key_list"),
        reverse("dashboard:session_detail", args=[session_pk]),
        reverse("dashboard:session_budget", args=[session_pk]),
        reverse("dashboard:session_usage", args=[session_pk]),
        reverse("dashboard:session_timeline", args=[session_pk]),
        reverse("dashboard:message_full", args=[session_pk, seq]),
        reverse("dashboard:session_transcript", args=[session_pk]),
        reverse("dashboard:session_context", args=[session_pk]),
        reverse("dashboard:session_context_json", args=[session_pk]),
        reverse("dashboard:output_view", args=[session_pk, ref]),
        reverse("dashboard:output_grep", args=[session_pk, ref]) + "?pattern=x",
        reverse("dashboard:output_raw", args=[session_pk, ref]),
        reverse("dashboard:compact_preview", args=[session_pk]),
        reverse("dashboard:compaction_history", args=[session_pk]),
    ]


def test_every_page_redirects_anonymous_to_login(make_dash_session):
    session = make_dash_session(turns=1)
    client = Client()
    for url in _urls(session.pk):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next="), url


def test_htmx_request_after_logout_redirects_the_whole_page(make_dash_session):
    session = make_dash_session(turns=1)
    url = reverse("dashboard:session_budget", args=[session.pk])
    response = Client().get(
        url, headers={**HX, "HX-Current-URL": f"http://testserver/sessions/{session.pk}/"}
    )
    # A login form swapped into the budget card would be wrong: htmx navigates instead.
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/accounts/login/?next=/sessions/{session.pk}/"


def test_non_staff_user_is_forbidden(visitor, make_dash_session):
    session = make_dash_session(turns=1)
    for url in _urls(session.pk)[:4]:
        assert visitor.get(url).status_code == 403, url


def test_writes_are_refused_without_csrf(operator, make_dash_session, alice_key):
    session = make_dash_session(turns=1)
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    posts = [
        (reverse("dashboard:key_list"), {"name": "x"}),
        (reverse("dashboard:key_revoke", args=[alice_key[0].pk]), {}),
        (reverse("dashboard:compact_start", args=[session.pk]), {"strategy": "chain"}),
        (reverse("dashboard:snapshot_restore_uncompacted", args=[session.pk]), {}),
    ]
    for url, data in posts:
        assert client.post(url, data).status_code == 403, url
    alice_key[0].refresh_from_db()
    assert alice_key[0].revoked_at is None


def test_writes_pass_with_the_csrf_header_htmx_sends(operator, alice_key):
    """base.html puts X-CSRFToken on <body> (hx-headers): every htmx request carries it."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    page = client.get(reverse("dashboard:key_list"))
    token = page.cookies["csrftoken"].value
    assert 'hx-headers=\'{"X-CSRFToken": "' in page.content.decode()
    response = client.post(
        reverse("dashboard:key_revoke", args=[alice_key[0].pk]),
        headers={**HX, "X-CSRFToken": token},
    )
    assert response.status_code == 200
    alice_key[0].refresh_from_db()
    assert alice_key[0].revoked_at is not None


def test_unknown_ids_are_404(op, make_dash_session):
    session = make_dash_session(turns=1)
    missing = session.pk + 1000
    for url in _urls(missing)[2:]:  # the list and keys pages have no id
        assert op.get(url).status_code == 404, url
    assert op.get(reverse("dashboard:message_full", args=[session.pk, 999])).status_code == 404
    assert (
        op.get(reverse("dashboard:output_view", args=[session.pk, "out_nope"])).status_code == 404
    )
    assert (
        op.get(reverse("dashboard:compaction_status", args=[session.pk, "not-a-uuid"])).status_code
        == 404
    )
    assert (
        op.get(
            reverse(
                "dashboard:compaction_status",
                args=[session.pk, "00000000-0000-0000-0000-000000000000"],
            )
        ).status_code
        == 404
    )
    assert op.get(reverse("dashboard:snapshot_detail", args=[session.pk, 12345])).status_code == 404
    assert (
        op.post(reverse("dashboard:snapshot_restore", args=[session.pk, 12345])).status_code == 404
    )
    assert op.post(reverse("dashboard:key_revoke", args=[99999])).status_code == 404


def test_another_sessions_output_is_404(op, make_dash_session):
    """A ref is looked up within the session of the URL, never across sessions."""
    a = make_dash_session(sid="a", turns=1)
    b = make_dash_session(sid="b", turns=1, tool_lines=3)
    ref_of_a = a.messages.exclude(output_ref=None).values_list("output_ref", flat=True).first()
    assert ref_of_a
    assert op.get(reverse("dashboard:output_view", args=[a.pk, ref_of_a])).status_code == 200
    assert op.get(reverse("dashboard:output_view", args=[b.pk, ref_of_a])).status_code == 404


def test_login_page_renders_and_logs_in(operator):
    client = Client()
    page = client.get("/accounts/login/?next=/")
    assert page.status_code == 200
    assert b'name="username"' in page.content and b"csrfmiddlewaretoken" in page.content
    response = client.post(
        "/accounts/login/", {"username": "operator", "password": "operator-pass-1", "next": "/"}
    )
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_logout_is_a_post_form_in_the_header(op):
    page = op.get("/").content.decode()
    assert 'action="/accounts/logout/"' in page and 'method="post"' in page
