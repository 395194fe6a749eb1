"""The inspector's Delete (with a confirmation step) and the retracted badge on the timeline."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from sessions.models import Message, Session
from sessions.services.retract import session_retract_messages
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


def _delete_url(session) -> str:
    return reverse("dashboard:session_delete", args=[session.pk])


def test_delete_asks_first_then_deletes_and_goes_back_to_the_list(op, make_dash_session):
    session = make_dash_session(turns=2)
    page = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    assert 'id="delete-panel"' in page and "Delete…" in page
    # The first step only asks, and names what will go.
    confirm = op.get(_delete_url(session), headers=HX)
    assert confirm.status_code == 200
    text = confirm.content.decode()
    assert "Delete for good" in text and session.external_id in text
    assert f"{session.message_count} messages" in text
    assert Session.objects.filter(pk=session.pk).exists()
    # The second step deletes.
    done = op.post(_delete_url(session), headers=HX)
    assert done.status_code == 200
    assert done["HX-Redirect"] == reverse("dashboard:session_list")
    assert not Session.objects.filter(pk=session.pk).exists()
    assert not Message.objects.filter(session_id=session.pk).exists()
    assert op.get(reverse("dashboard:session_detail", args=[session.pk])).status_code == 404


def test_without_htmx_the_confirmation_is_a_page_and_the_post_redirects(op, make_dash_session):
    session = make_dash_session(turns=1)
    page = op.get(_delete_url(session))
    assert page.status_code == 200 and "Delete for good" in page.content.decode()
    done = op.post(_delete_url(session))
    assert done.status_code == 302 and done["Location"] == reverse("dashboard:session_list")


def test_only_staff_and_only_with_the_csrf_token(operator, visitor, make_dash_session):
    session = make_dash_session(turns=1)
    assert visitor.post(_delete_url(session)).status_code == 403
    anonymous = Client()
    assert anonymous.post(_delete_url(session)).status_code == 302  # to the login page
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(_delete_url(session)).status_code == 403
    assert Session.objects.filter(pk=session.pk).exists()
    # With the token the page carries (hx-headers on <body>), it goes through.
    page = strict.get(reverse("dashboard:session_detail", args=[session.pk]))
    token = page.context["csrf_token"]
    assert strict.post(_delete_url(session), headers={"X-CSRFToken": str(token)}).status_code == 302
    assert not Session.objects.filter(pk=session.pk).exists()


def test_retracted_messages_show_in_the_timeline_with_a_badge(op, make_dash_session):
    session = make_dash_session(turns=2)
    last = Message.objects.filter(session=session).order_by("-seq").first()
    session_retract_messages(session=session, last=1)
    page = op.get(reverse("dashboard:session_timeline", args=[session.pk]), headers=HX)
    text = page.content.decode()
    assert 'class="vbadge vbadge-retracted">retracted<' in text
    assert text.count("vbadge-retracted") == 1
    assert Message.objects.get(pk=last.pk).retracted_at is not None
