"""The API's catch-all: an unexpected exception is DESIGN.md's JSON error body
with a request id (its traceback logged under that id), never an HTML page;
every response carries ``X-Request-Id``. The real lost-connection test is
tests/test_db_loss.py (PostgreSQL); here the database error is raised by the
view so the answer's shape is checked on every backend."""

from __future__ import annotations

import logging
import re

import pytest
from django.db import InterfaceError, OperationalError
from django.test import Client, RequestFactory

from contextsvc.middleware import server_error
from sessions import selectors

pytestmark = pytest.mark.django_db

HEX_ID = re.compile(r"[0-9a-f]{32}")


def _boom(*args, **kwargs):
    raise RuntimeError("boom: an invariant broke")


@pytest.mark.parametrize("debug", [False, True])
def test_unexpected_error_is_json_500_with_a_logged_request_id(
    alice, monkeypatch, caplog, settings, debug
):
    settings.DEBUG = debug  # ninja's own fallback would send a text/plain traceback
    monkeypatch.setattr(selectors, "session_list", _boom)
    with caplog.at_level(logging.ERROR, logger="contextsvc.errors"):
        response = alice.get("sessions")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    rid = response["X-Request-Id"]
    assert HEX_ID.fullmatch(rid)
    assert error["code"] == "INTERNAL_ERROR"
    assert error["details"] == {"request_id": rid}
    assert rid in error["message"] and "boom" not in error["message"]  # no internals leak
    logged = [r for r in caplog.records if rid in r.getMessage()]
    assert logged and logged[0].exc_info[0] is RuntimeError


@pytest.mark.parametrize("exc", [OperationalError, InterfaceError])
def test_database_error_in_the_api_is_json_503_with_retry_after(alice, monkeypatch, exc):
    def lost(*args, **kwargs):
        raise exc("server closed the connection unexpectedly")

    monkeypatch.setattr(selectors, "session_list", lost)
    response = alice.get("sessions")
    assert response.status_code == 503
    assert response["Retry-After"].isdigit()
    error = response.json()["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE"
    assert error["details"] == {"request_id": response["X-Request-Id"]}


def test_client_request_id_is_kept_when_sane(alice):
    response = alice.request("GET", "sessions", headers={"X-Request-Id": "trace-42.a:b_C"})
    assert response.status_code == 200
    assert response["X-Request-Id"] == "trace-42.a:b_C"


@pytest.mark.parametrize("incoming", ["a b", "x" * 129, "<script>", ""])
def test_insane_request_id_is_replaced(alice, incoming):
    response = alice.request("GET", "sessions", headers={"X-Request-Id": incoming})
    assert HEX_ID.fullmatch(response["X-Request-Id"])


def test_every_api_answer_carries_a_request_id(alice, anon):
    answers = [
        anon.get("sessions"),  # 401
        alice.get("sessions/nope"),  # 404
        alice.post("sessions", {"model": 5}),  # 422
        alice.post("sessions", {"model": "claude-sonnet-4-5"}),  # 201
    ]
    assert [r.status_code for r in answers] == [401, 404, 422, 201]
    ids = [r["X-Request-Id"] for r in answers]
    assert all(HEX_ID.fullmatch(rid) for rid in ids) and len(set(ids)) == len(ids)


def _escaped(path: str, exc: Exception):
    """handler500 as Django calls it: while the exception is being handled."""
    request = RequestFactory().get(path)
    try:
        raise exc
    except Exception:
        return server_error(request)


def test_what_escapes_the_views_under_the_api_is_json_too(caplog):
    with caplog.at_level(logging.ERROR, logger="contextsvc.errors"):
        response = _escaped("/api/v1/sessions", KeyError("thresholds"))
    assert response.status_code == 500 and response["Content-Type"] == "application/json"
    assert b'"INTERNAL_ERROR"' in response.content
    assert any(r.exc_info and r.exc_info[0] is KeyError for r in caplog.records)


def test_what_escapes_elsewhere_is_django_s_plain_500_or_a_503():
    page = _escaped("/", KeyError("x"))
    assert page.status_code == 500 and b"Traceback" not in page.content
    lost = _escaped("/", OperationalError("terminating connection"))
    assert lost.status_code == 503 and lost["Content-Type"].startswith("text/html")
    assert lost["Retry-After"].isdigit()


def test_dashboard_database_error_is_a_plain_503_page(django_user_model, monkeypatch):
    operator = django_user_model.objects.create_user("op", password="pw", is_staff=True)
    client = Client()
    client.force_login(operator)

    def lost(*args, **kwargs):
        raise OperationalError("the connection is lost")

    monkeypatch.setattr("sessions.dashboard.views.session_page", lost)
    response = client.get("/")
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert response["Retry-After"].isdigit() and response["X-Request-Id"]


def test_unknown_api_url_is_a_json_404_and_pages_stay_html(alice, client):
    response = alice.get("no-such-operation/at/all")
    assert response.status_code == 404 and response["Content-Type"] == "application/json"
    body = response.json()["error"]
    assert body["code"] == "NOT_FOUND" and "/api/v1/no-such-operation/at/all" in body["message"]
    assert response["X-Request-Id"]
    page = client.get("/no-such-page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
