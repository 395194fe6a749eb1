"""Password reset by mail exists only where mail is delivered: without an email
backend (EMAIL_HOST, or an EMAIL_BACKEND other than console/dummy/locmem) its
pages are 404s and the login page has no link to it; with one, asking for a
mail is limited per client address and per email address entered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import mail
from django.test import Client

from contextsvc import accounts

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
RESET = "/accounts/password_reset/"
RESET_PAGES = [RESET, "/accounts/password_reset/done/", "/accounts/reset/done/"]
RESET_PAGES.append("/accounts/reset/MQ/set-password/")  # the link a mail carries


@pytest.fixture
def reset_on(settings, operator):
    """Mail delivered (the test backend keeps it), a fresh in-memory throttle."""
    settings.CONTEXTSVC_PASSWORD_RESET = True
    settings.CONTEXTSVC_RATE_LIMIT_STORAGE = "memory://"
    settings.CONTEXTSVC_PASSWORD_RESET_RATE = "3/hour"
    accounts._reset_limiter.cache_clear()
    operator.email = "operator@example.com"
    operator.save()
    yield
    accounts._reset_limiter.cache_clear()


def ask(email: str, ip: str = "203.0.113.7"):
    return Client().post(RESET, {"email": email}, REMOTE_ADDR=ip)


@pytest.mark.parametrize("page", RESET_PAGES)
def test_without_mail_every_reset_page_is_a_404(settings, page):
    settings.CONTEXTSVC_PASSWORD_RESET = False
    assert Client().get(page).status_code == 404
    assert Client().post(page, {"email": "operator@example.com"}).status_code == 404
    assert not mail.outbox


def test_without_mail_the_login_page_has_no_reset_link(settings):
    settings.CONTEXTSVC_PASSWORD_RESET = False
    page = Client().get("/accounts/login/").content.decode()
    assert RESET not in page and "Forgot your password" not in page


def test_the_login_page_names_the_command_that_works_outside_the_venv():
    page = Client().get("/accounts/login/").content.decode()
    assert "<code>bin/manage createsuperuser</code>" in page
    assert "python manage.py" not in page


def test_with_mail_the_login_page_links_to_reset_and_a_mail_is_sent(reset_on):
    page = Client().get("/accounts/login/").content.decode()
    assert f'href="{RESET}"' in page
    response = ask("operator@example.com")
    assert response.status_code == 302 and response["Location"] == "/accounts/password_reset/done/"
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["operator@example.com"]
    assert "/accounts/reset/" in mail.outbox[0].body


def test_asking_again_and_again_from_one_address_is_throttled(reset_on):
    answers = [ask(f"someone{n}@example.com").status_code for n in range(3)]
    assert answers == [302, 302, 302]
    refused = ask("operator@example.com")
    assert refused.status_code == 429
    assert "Too many password reset requests" in refused.content.decode()
    assert not mail.outbox  # the operator's mail was never sent
    assert ask("operator@example.com", ip="198.51.100.9").status_code == 302
    assert len(mail.outbox) == 1


def test_one_email_address_is_throttled_from_any_address(reset_on):
    for n in range(3):
        assert ask("operator@example.com", ip=f"198.51.100.{n}").status_code == 302
    assert ask("Operator@Example.com ", ip="198.51.100.99").status_code == 429
    assert len(mail.outbox) == 3


def _email_settings(**env: str) -> tuple[str, str]:
    """(EMAIL_BACKEND, CONTEXTSVC_PASSWORD_RESET) as a fresh process reads the environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("EMAIL_")}
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.EMAIL_BACKEND, s.CONTEXTSVC_PASSWORD_RESET)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "contextsvc.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    backend, enabled = result.stdout.split()
    return backend.rsplit(".", 2)[-2], enabled


def test_configured_means_an_smtp_host_or_a_backend_that_delivers():
    assert _email_settings() == ("console", "False")
    assert _email_settings(EMAIL_HOST="smtp.example.com") == ("smtp", "True")
    smtp = "django.core.mail.backends.smtp.EmailBackend"
    assert _email_settings(EMAIL_BACKEND=smtp) == ("smtp", "True")  # a local MTA
    dummy = "django.core.mail.backends.dummy.EmailBackend"
    assert _email_settings(EMAIL_HOST="smtp.example.com", EMAIL_BACKEND=dummy) == (
        "dummy",
        "False",
    )
