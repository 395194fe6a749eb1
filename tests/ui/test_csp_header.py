"""The Content-Security-Policy header on every page, and dashboard HTML that
needs nothing the policy forbids (no inline script, no inline handler, no
htmx code to eval). The browser test (test_csp_browser.py) proves it runs."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

INLINE_HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)
SCRIPT_TAG = re.compile(r"<script\b([^>]*)>", re.IGNORECASE)


def policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {
        name: values
        for name, *values in (part.split() for part in header.split(";") if part.strip())
    }


def test_dashboard_login_and_api_docs_carry_the_policy(op, make_dash_session):
    session = make_dash_session(turns=1)
    for client, url in [
        (Client(), reverse("login")),
        (op, reverse("dashboard:session_list")),
        (op, reverse("dashboard:session_detail", args=[session.pk])),
        (op, reverse("dashboard:key_list")),
        (Client(), "/api/v1/docs"),
    ]:
        response = client.get(url)
        assert response.status_code == 200, url
        rules = policy(response)
        assert rules["script-src"] == ["'self'"], url  # no unsafe-inline, no unsafe-eval
        assert rules["default-src"] == ["'self'"]
        assert rules["object-src"] == ["'none'"]
        assert rules["frame-ancestors"] == ["'none'"]
        assert "'unsafe-inline'" not in rules["style-src"]


def test_dashboard_html_has_no_inline_script_or_eval(op, make_dash_session):
    session = make_dash_session(turns=3, tool_lines=400)
    pages = [
        reverse("login"),
        reverse("dashboard:session_list"),
        reverse("dashboard:session_detail", args=[session.pk]),
        reverse("dashboard:key_list"),
        reverse("dashboard:compaction_history", args=[session.pk]),
        reverse("dashboard:session_context", args=[session.pk]) + "?format=anthropic",
    ]
    for url in pages:
        html = op.get(url).content.decode()
        for attrs in SCRIPT_TAG.findall(html):
            assert "src=" in attrs, f"inline <script> on {url}"
        assert not INLINE_HANDLER.search(html), f"inline on*= handler on {url}"
        for values in re.findall(r"hx-vals='([^']*)'", html):
            assert not values.startswith("js:"), f"{values!r} on {url}"
        # htmx trigger filters ([...]) are code htmx would eval.
        for trigger in re.findall(r'hx-trigger="([^"]*)"', html):
            assert "[" not in trigger, f"{trigger!r} on {url}"


def test_json_answers_of_the_api_carry_no_policy_and_pages_do(alice, client):
    answer = alice.post("sessions", {"model": "claude-sonnet-4-5"})
    assert answer.status_code == 201 and answer["Content-Type"].startswith("application/json")
    assert "Content-Security-Policy" not in answer
    assert answer["X-Content-Type-Options"] == "nosniff"  # no sniffing a script out of it
    assert "script-src 'self'" in client.get("/api/v1/docs")["Content-Security-Policy"]
