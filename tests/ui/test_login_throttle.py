"""Operators' login is throttled (django-axes): after AXES_FAILURE_LIMIT wrong
passwords for one username from one address, that pair is locked out with a
clear message, even with the right password; other users and other addresses
are not; after CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT failures from one
address across usernames, that address is; `axes_reset` unlocks; the agent API
(bearer keys) is untouched."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from tests.ui.conftest import OPERATOR_PASSWORD

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


def attempt(client: Client, username: str, password: str, ip: str = "203.0.113.7"):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=ip)


def fail(client: Client, times: int, username: str = "operator", ip: str = "203.0.113.7"):
    return [attempt(client, username, "wrong-password", ip) for _ in range(times)]


def signed_in(response) -> bool:
    return response.status_code == 302 and response["Location"] == "/"


def test_defaults_are_five_failures_and_a_fifteen_minute_cool_off(settings):
    assert settings.AXES_FAILURE_LIMIT == 5
    assert settings.CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT == 20
    assert settings.AXES_COOLOFF_TIME.total_seconds() == 15 * 60
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_failures_below_the_limit_do_not_lock(operator, settings):
    client = Client()
    responses = fail(client, settings.AXES_FAILURE_LIMIT - 1)
    # Each is the ordinary login page with the ordinary error.
    assert [r.status_code for r in responses] == [200] * (settings.AXES_FAILURE_LIMIT - 1)
    assert b"didn't match" in responses[-1].content
    assert signed_in(attempt(client, "operator", OPERATOR_PASSWORD))


def test_a_success_clears_the_count(operator, settings):
    client = Client()
    fail(client, settings.AXES_FAILURE_LIMIT - 1)
    assert signed_in(attempt(client, "operator", OPERATOR_PASSWORD))
    client.logout()
    # Another limit-1 failures after the success: still not locked.
    fail(client, settings.AXES_FAILURE_LIMIT - 1)
    assert signed_in(attempt(client, "operator", OPERATOR_PASSWORD))


def test_the_nth_failure_locks_out_even_the_right_password(operator, settings):
    client = Client()
    responses = fail(client, settings.AXES_FAILURE_LIMIT)
    assert [r.status_code for r in responses[:-1]] == [200] * (settings.AXES_FAILURE_LIMIT - 1)
    locked = responses[-1]
    assert locked.status_code == 429
    right = attempt(client, "operator", OPERATOR_PASSWORD)
    assert right.status_code == 429
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302  # still not signed in


def test_the_lockout_page_says_why_for_how_long_and_how_to_unlock(operator, settings):
    response = fail(Client(), settings.AXES_FAILURE_LIMIT)[-1]
    text = response.content.decode()
    assert response.status_code == 429
    assert 'id="lockout"' in text and "Sign-in locked." in text
    assert f"Too many failed sign-ins ({settings.AXES_FAILURE_LIMIT})" in text
    assert "Try again in 15 minutes" in text
    assert "axes_reset_username operator" in text
    # Still the login page: the username kept, the form there to retry later.
    assert 'name="password"' in text and 'value="operator"' in text
    assert response["Content-Security-Policy"]


def test_another_address_or_another_user_is_not_locked(operator, settings):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user(username="second", password="second-pass-1", is_staff=True)
    fail(Client(), settings.AXES_FAILURE_LIMIT, ip="203.0.113.7")
    assert attempt(Client(), "operator", OPERATOR_PASSWORD).status_code == 429
    # The same user from another address, another user from the same address.
    assert signed_in(attempt(Client(), "operator", OPERATOR_PASSWORD, ip="198.51.100.9"))
    assert signed_in(attempt(Client(), "second", "second-pass-1", ip="203.0.113.7"))


def test_the_admin_login_is_throttled_too(operator, settings):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response = client.post(
            "/admin/login/",
            {"username": "operator", "password": "wrong-password"},
            REMOTE_ADDR="203.0.113.7",
        )
    assert response.status_code == 429
    assert attempt(client, "operator", OPERATOR_PASSWORD).status_code == 429


@pytest.mark.parametrize(
    "command",
    [("axes_reset",), ("axes_reset_username", "operator"), ("axes_reset_ip", "203.0.113.7")],
)
def test_reset_commands_unlock(operator, settings, command):
    fail(Client(), settings.AXES_FAILURE_LIMIT)
    assert attempt(Client(), "operator", OPERATOR_PASSWORD).status_code == 429
    call_command(*command)
    assert signed_in(attempt(Client(), "operator", OPERATOR_PASSWORD))


def test_the_api_is_untouched_by_a_lockout(operator, settings, alice, make_session):
    fail(Client(), settings.AXES_FAILURE_LIMIT, ip="127.0.0.1")  # the test client's address
    assert attempt(Client(), "operator", OPERATOR_PASSWORD, ip="127.0.0.1").status_code == 429
    make_session(id="after-lockout")  # asserts its 201
    assert alice.get("sessions/after-lockout").status_code == 200


def spray(limit: int, ip: str = "203.0.113.7") -> list:
    """One wrong password for each of ``limit`` usernames: never the pair's limit."""
    return [attempt(Client(), f"user{n}", "wrong-password", ip) for n in range(limit)]


def test_one_address_trying_many_usernames_is_locked_out(operator, settings):
    limit = settings.CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT
    responses = spray(limit)
    assert [r.status_code for r in responses[:-1]] == [200] * (limit - 1)
    locked = responses[-1]
    assert locked.status_code == 429
    text = locked.content.decode()
    assert "from your address, whatever the username" in text
    assert "axes_reset_ip 203.0.113.7" in text
    # Every username from that address now, the right password too ...
    right = attempt(Client(), "operator", OPERATOR_PASSWORD)
    assert right.status_code == 429 and "whatever the username" in right.content.decode()
    # ... but not from another address.
    assert signed_in(attempt(Client(), "operator", OPERATOR_PASSWORD, ip="198.51.100.9"))


def test_below_the_address_limit_another_username_still_signs_in(operator, settings):
    spray(settings.CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT - 1)
    assert signed_in(attempt(Client(), "operator", OPERATOR_PASSWORD))


def test_the_address_limit_is_a_setting(operator, settings):
    settings.CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT = 3
    assert [r.status_code for r in spray(3)] == [200, 200, 429]


def test_the_address_lock_ends_with_the_cool_off(operator, settings):
    spray(settings.CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT)
    assert attempt(Client(), "operator", OPERATOR_PASSWORD).status_code == 429
    AccessAttempt.objects.update(
        attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    )
    assert signed_in(attempt(Client(), "operator", OPERATOR_PASSWORD))


def test_axes_reset_ip_unlocks_an_address(operator, settings):
    spray(settings.CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT)
    call_command("axes_reset_ip", "203.0.113.7")
    assert signed_in(attempt(Client(), "operator", OPERATOR_PASSWORD))
