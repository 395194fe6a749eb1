"""An agent key's API call passes the page-only middleware (user, messages) and
still gets every security header; pages and an operator's signed-in API call
go through it as before (contextsvc/page_middleware.py)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import RequestFactory

from contextsvc.page_middleware import is_key_call

pytestmark = pytest.mark.django_db

BEARER = {"HTTP_AUTHORIZATION": "Bearer some-key"}


@pytest.mark.parametrize(
    ("path", "meta", "expected"),
    [
        ("/api/v1/sessions/s1/messages", BEARER, True),
        ("/api/v1/sessions/s1/messages", {**BEARER, "HTTP_COOKIE": "csrftoken=abc"}, True),
        ("/api/v1/sessions/s1/messages", {}, False),  # no key: the 401, as before
        ("/api/v1/docs", {}, False),  # the API's docs page
        ("/sessions/", BEARER, False),  # a page
    ],
)
def test_which_calls_are_an_agent_keys(path, meta, expected):
    assert is_key_call(RequestFactory().post(path, **meta)) is expected


def test_a_call_with_the_session_cookie_is_an_operators():
    cookie = {"HTTP_COOKIE": f"{settings.SESSION_COOKIE_NAME}=abc"}
    request = RequestFactory().put("/api/v1/models/m", **BEARER, **cookie)
    assert not is_key_call(request)


def test_an_agent_keys_answer_keeps_its_headers_and_sets_no_cookie(alice, make_session):
    sid = make_session()["id"]
    answer = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]}
    )
    assert answer.status_code == 200
    assert answer["X-Request-Id"]
    assert answer["X-Content-Type-Options"] == "nosniff"
    assert answer["X-Frame-Options"] == "DENY"
    assert not answer.cookies
    assert "Cookie" not in answer.get("Vary", "")
