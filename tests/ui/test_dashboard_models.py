"""The Models & prices page: staff only, a form per model (htmx or plain), validation
naming the field, a model added with its limits, and the "no price set" links that lead there."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from prompting.context.service import context_for_call
from prompting.services.policy import forget_profiles
from sessions.models import ContextCall, ModelProfile
from sessions.selectors_models import model_anchor
from sessions.services.append import session_append_messages
from sessions.services.sessions import session_create
from sessions.services.usage import session_record_usage
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db

PAGE = "/models/"
FOUR = {"input": "2", "output": "8", "cache_write_5m": "2.5", "cache_read": "0.2"}


@pytest.fixture(autouse=True)
def _profiles_read_again():
    """A price changed here must not stay in this process's profile cache for the next test."""
    forget_profiles()
    yield
    forget_profiles()


def _row(model: str, provider: str = "anthropic") -> ModelProfile:
    return ModelProfile.objects.get(provider=provider, model=model)


def _save_url(profile: ModelProfile) -> str:
    return reverse("dashboard:model_prices_save", args=[profile.pk])


def _call(key, *, sid: str, model: str, provider: str = "") -> ContextCall:
    """One build of a one-message session on ``model``, completed by a usage report."""
    session = session_create(
        owner=key, data={"id": sid, "model": model, "provider": provider or None}
    )
    session_append_messages(session=session, messages=[{"role": "user", "content": "hi"}])
    session.refresh_from_db()
    context_for_call(session=session, fmt="anthropic", preflight=False)
    session.refresh_from_db()
    usage = {"input_tokens": 1_000, "output_tokens": 100, "cache_read_tokens": 10_000}
    session_record_usage(session=session, usage=usage)
    return ContextCall.objects.filter(session=session).latest("id")


def test_the_page_is_for_operators_only(visitor, db):
    sonnet = _row("claude-sonnet-4-5")
    for url in (PAGE, reverse("dashboard:model_add"), _save_url(sonnet)):
        anonymous = Client().get(url) if url == PAGE else Client().post(url, FOUR)
        assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
        response = visitor.get(url) if url == PAGE else visitor.post(url, FOUR)
        assert response.status_code == 403, url
    assert _row("claude-sonnet-4-5").prices["input"] == pytest.approx(3)
    assert not ModelProfile.objects.filter(prices_set_at__isnull=False).exists()


def test_the_page_lists_every_model_with_its_limits_prices_and_their_source(op):
    page = op.get(PAGE).content.decode()
    assert "Models &amp; prices" in page and 'aria-current="page">Models &amp; prices' in page
    sonnet = re.search(r'<tr id="model-anthropic_2f_claude-sonnet-4-5".*?</tr>', page, re.S)
    assert sonnet, "a row per model, anchored at its name"
    row = sonnet.group(0)
    assert "200,000" in row and "64,000" in row
    assert 'name="input" value="3"' in row and 'name="cache_read" value="0.3"' in row
    assert 'name="cache_write_5m" value="3.75"' in row and "published default" in row
    default = re.search(r'<tr id="model-anthropic_2f__2a_".*?</tr>', page, re.S).group(0)
    assert "any other anthropic model" in default and "no price set" in default


def test_an_operator_edits_a_price_and_a_new_calls_cost_uses_it(
    op, alice_key, django_capture_on_commit_callbacks
):
    ModelProfile.objects.create(
        provider="anthropic", model="claude-price-b", prices={"input": 1, "output": 1}
    )
    before = _call(alice_key[0], sid="before", model="claude-price-b")
    with django_capture_on_commit_callbacks(execute=True):  # as the commit would
        response = op.post(_save_url(_row("claude-price-b")), FOUR, headers=HX)
    assert response.status_code == 200
    row = response.content.decode()
    assert '<tr id="model-anthropic_2f_claude-price-b"' in row
    assert "saved" in row and "set by operator" in row and 'name="input" value="2"' in row
    stored = _row("claude-price-b")
    assert stored.prices == {"input": 2.0, "output": 8.0, "cache_write_5m": 2.5, "cache_read": 0.2}
    assert stored.prices_set_by == "operator" and stored.prices_set_at is not None

    after = _call(alice_key[0], sid="after", model="claude-price-b")
    assert after.cost_usd == pytest.approx((1_000 * 2 + 10_000 * 0.2 + 100 * 8) / 1e6)
    # The call recorded before keeps the cost of its build's prices.
    before.refresh_from_db()
    assert before.cost_usd == pytest.approx((1_000 * 1 + 10_000 * 0.1 + 100 * 1) / 1e6)
    # And its detail says where its prices came from.
    detail = op.get(
        reverse("dashboard:session_call", args=[after.session_id, after.pk]), headers=HX
    ).content.decode()
    assert 'data-testid="call-prices"' in detail and "$2 in · $8 out" in detail
    assert "anthropic/claude-price-b" in detail and "set by operator" in detail


def test_a_plain_form_post_redirects_back_to_the_row(op):
    sonnet = _row("claude-sonnet-4-5")
    response = op.post(_save_url(sonnet), {**FOUR, "cache_write_1h": "5"})
    assert response.status_code == 302
    assert (
        response["Location"]
        == f"{PAGE}?saved={sonnet.pk}#{model_anchor('anthropic', 'claude-sonnet-4-5')}"
    )
    assert _row("claude-sonnet-4-5").prices["cache_write_1h"] == 5.0
    page = op.get(response["Location"]).content.decode()
    assert 'role="status">saved</span>' in page


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**FOUR, "input": "-1"}, "Input: Ensure this value is greater than or equal to 0."),
        ({**FOUR, "output": "abc"}, "Output: Enter a number."),
        ({**FOUR, "cache_read": "NaN"}, "Cache read: Enter a number."),
        ({**FOUR, "cache_read": ""}, "Cache read: Set all four prices, or none to clear them."),
        ({"cache_write_1h": "3"}, "Cache write (1 h): Only beside the four prices."),
    ],
)
def test_bad_prices_are_form_errors_naming_the_field(op, data, message):
    sonnet = _row("claude-sonnet-4-5")
    htmx = op.post(_save_url(sonnet), data, headers=HX)
    assert htmx.status_code == 200  # htmx swaps the row with its errors in place
    assert (
        escape(message) in htmx.content.decode() and 'aria-invalid="true"' in htmx.content.decode()
    )
    plain = op.post(_save_url(sonnet), data)
    assert plain.status_code == 422 and escape(message) in plain.content.decode()
    stored = _row("claude-sonnet-4-5")
    assert stored.prices["input"] == pytest.approx(3) and stored.prices_set_at is None


def test_all_four_blank_clears_the_price(op):
    op.post(_save_url(_row("claude-haiku-4-5")), {k: "" for k in FOUR}, headers=HX)
    cleared = _row("claude-haiku-4-5")
    assert cleared.prices == {} and cleared.prices_set_by == "operator"


def test_no_price_set_links_to_the_page_prefilled_for_a_new_model(op, alice_key):
    call = _call(alice_key[0], sid="unpriced", model="acme-large", provider="acme")
    assert call.cost_usd is None
    card = op.get(
        reverse("dashboard:session_calls", args=[call.session_id]), headers=HX
    ).content.decode()
    anchor = model_anchor("acme", "acme-large")
    link = f"{PAGE}?provider=acme&amp;model=acme-large#{anchor}"
    assert f'<a class="no-price" href="{link}"' in card and ">no price set</a>" in card
    detail = op.get(
        reverse("dashboard:session_call", args=[call.session_id, call.pk]), headers=HX
    ).content.decode()
    assert f'href="{link}"' in detail and "no price for this model" not in detail
    listing = op.get(reverse("dashboard:session_list")).content.decode()
    assert f'href="{link}"' in listing

    page = op.get(f"{PAGE}?provider=acme&model=acme-large").content.decode()
    card = re.search(rf'<section class="card new-model" id="{anchor}".*?</section>', page, re.S)
    assert card, "the new model's form, at the link's anchor"
    form = card.group(0)
    assert "No price set for" in form and 'name="model" value="acme-large"' in form
    # What a session on it gets today: no acme row, so the built-in defaults.
    assert 'name="context_window" value="131072"' in form
    assert 'name="max_output_tokens" value="32768"' in form


def test_a_dated_id_is_sent_to_its_family_row(op):
    ModelProfile.objects.filter(provider="anthropic", model="claude-3-opus").update(prices={})
    page = op.get(f"{PAGE}?provider=anthropic&model=claude-3-opus-20240229").content.decode()
    alias = model_anchor("anthropic", "claude-3-opus-20240229")
    row = re.search(r'<tr id="model-anthropic_2f_claude-3-opus".*?</tr>', page, re.S).group(0)
    assert f'id="{alias}"' in row and "is-targeted" in row
    assert "takes its prices from the profile" in page


def test_an_operator_adds_a_model_with_its_prices_and_limits(op):
    data = {"provider": "acme", "model": "acme-xl", "context_window": "64000"}
    data |= {"max_output_tokens": "8000", **FOUR}
    response = op.post(reverse("dashboard:model_add"), data, headers=HX)
    assert response.status_code == 200 and response["HX-Redirect"].startswith(f"{PAGE}?saved=")
    added = _row("acme-xl", provider="acme")
    assert (added.context_window, added.max_output_tokens) == (64_000, 8_000)
    assert added.prices["output"] == 8.0 and added.prices_set_by == "operator"
    # A second add of the same model is refused: its row is where its prices are set.
    again = op.post(reverse("dashboard:model_add"), data, headers=HX).content.decode()
    assert "Model: acme/acme-xl has a profile already" in again
    no_prices = op.post(
        reverse("dashboard:model_add"), {**data, "model": "acme-s", **dict.fromkeys(FOUR, "")}
    )
    assert no_prices.status_code == 422
    assert "Input: A model added here needs its prices." in no_prices.content.decode()
    assert not ModelProfile.objects.filter(model="acme-s").exists()


def test_the_admin_lists_profiles_and_checks_a_price_table(db):
    admin = get_user_model().objects.create_superuser(username="root", password="x")
    client = Client()
    client.force_login(admin)
    changelist = client.get("/admin/agent_sessions/modelprofile/").content.decode()
    assert "claude-sonnet-4-5" in changelist and "published default" in changelist
    assert "Input $/MTok" in changelist
    sonnet = _row("claude-sonnet-4-5")
    form = {
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "context_window": "200000",
        "max_output_tokens": "64000",
        "tokenizer": sonnet.tokenizer,
        "min_cacheable_tokens": "1024",
        "prices": '{"input": -3, "output": 15, "cache_write_5m": 3.75, "cache_read": 0.3}',
    }
    url = f"/admin/agent_sessions/modelprofile/{sonnet.pk}/change/"
    refused = client.post(url, form)
    assert refused.status_code == 200 and "input: must be 0 or more" in refused.content.decode()
    form["prices"] = '{"input": 4, "output": 15, "cache_write_5m": 5, "cache_read": 0.4}'
    assert client.post(url, form).status_code == 302
    saved = _row("claude-sonnet-4-5")
    assert saved.prices["input"] == 4.0 and saved.prices_set_by == "root"
