"""The sessions list names each session by its first user message, client and origin,
counts its failed calls, and filters on them."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.ui.test_dashboard_list import _bare_session

pytestmark = pytest.mark.django_db

LIST = reverse("dashboard:session_list")
ASK = "Refactor the billing module so that invoices are computed in one place " * 3


def _seed(alice_key):
    proxied = _bare_session(
        alice_key[0],
        "px_3f9a1c",
        via="proxy",
        client="Claude Code 2.0.14",
        first_user_text=ASK[:200],
        failed_calls=2,
    )
    rest = _bare_session(alice_key[0], "ses_rest", client="curl 8.5.0")
    return proxied, rest


def test_list_shows_first_message_shortened_with_the_whole_on_hover(op, alice_key):
    _seed(alice_key)
    html = op.get(LIST).content.decode()
    assert f'title="{ASK[:200]}"' in html  # the whole (stored) message on hover
    assert ASK[:60] in html and ASK[:200] + "</a>" not in html  # shortened in the cell
    assert "Claude Code 2.0.14" in html and "curl 8.5.0" in html
    assert 'class="failed-count"' in html and "2 failed" in html
    assert html.count('class="failed-count"') == 1  # none for 0 failed calls


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ({"via": "proxy"}, "px_3f9a1c", "ses_rest"),
        ({"via": "api"}, "ses_rest", "px_3f9a1c"),
        ({"client": "curl 8.5.0"}, "ses_rest", "px_3f9a1c"),
        ({"failed": "1"}, "px_3f9a1c", "ses_rest"),
        ({"q": "billing module"}, "px_3f9a1c", "ses_rest"),
    ],
)
def test_list_filters_on_origin_client_failed_calls_and_first_message(
    op, alice_key, query, shown, hidden
):
    _seed(alice_key)
    html = op.get(LIST, query).content.decode()
    assert shown in html
    assert hidden not in html


def test_the_client_filter_offers_the_clients_in_use(op, alice_key):
    _seed(alice_key)
    html = op.get(LIST).content.decode()
    assert '<option value="Claude Code 2.0.14"' in html
    assert '<option value="proxy"' in html
