"""GET /models (every key reads limits and prices) and PUT /models/{provider}/{model}/prices
(operators only: a staff session; an agent key is a 403)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from prompting.services.policy import forget_profiles
from sessions.models import ContextCall, ModelProfile

pytestmark = pytest.mark.django_db

PRICES = {"input": 2.0, "output": 8.0, "cache_write_5m": 2.5, "cache_read": 0.2}


@pytest.fixture(autouse=True)
def _profiles_read_again():
    """A price changed here must not stay in this process's profile cache for the next test."""
    forget_profiles()
    yield
    forget_profiles()


def _staff(*, is_staff: bool = True, csrf: bool = False) -> Client:
    user, _ = get_user_model().objects.get_or_create(
        username="op" if is_staff else "visitor", defaults={"is_staff": is_staff}
    )
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def _put(client: Client, path: str, body: dict, **headers: str):
    return client.put(
        f"/api/v1/models/{path}/prices",
        data=json.dumps(body),
        content_type="application/json",
        headers=headers,
    )


def test_every_key_lists_the_models_with_their_limits_and_prices(alice, anon):
    r = alice.get("models")
    assert r.status_code == 200, r.content
    items = {(m["provider"], m["model"]): m for m in r.json()["items"]}
    sonnet = items[("anthropic", "claude-sonnet-4-5")]
    assert sonnet["context_window"] == 200_000 and sonnet["max_output_tokens"] == 64_000
    assert sonnet["prices"] == {
        "input": 3.0,
        "output": 15.0,
        "cache_write_5m": 3.75,
        "cache_write_1h": 6.0,
        "cache_read": 0.3,
    }
    assert sonnet["prices_from"] == "anthropic/claude-sonnet-4-5"
    assert sonnet["prices_set_at"] is None and sonnet["prices_set_by"] is None  # published
    # The provider's default row: any other model, no price, limits as a session gets them.
    default = items[("anthropic", "*")]
    assert default["prices"] is None and default["prices_from"] is None
    assert default["context_window"] == 200_000 and default["max_output_tokens"] == 50_000
    # An OpenAI row leaves cache writes out: listed as charged (1.25 × input).
    assert items[("openai", "gpt-4o")]["prices"]["cache_write_5m"] == pytest.approx(3.125)
    assert anon.get("models").status_code == 401


def test_agent_keys_cannot_write_prices(alice, bob):
    before = ModelProfile.objects.get(provider="anthropic", model="claude-sonnet-4-5").prices
    for client in (alice, bob):
        r = client.put("models/anthropic/claude-sonnet-4-5/prices", PRICES)
        assert r.status_code == 403, r.content
        assert r.json()["error"]["code"] == "FORBIDDEN"
        assert "Agent keys cannot change model prices" in r.json()["error"]["message"]
    # Nor add a model.
    assert alice.put("models/acme/acme-1/prices", PRICES).status_code == 403
    assert not ModelProfile.objects.filter(provider="acme").exists()
    after = ModelProfile.objects.get(provider="anthropic", model="claude-sonnet-4-5").prices
    assert after == before


def test_a_missing_or_bad_key_is_a_401_and_a_non_staff_session_a_403(anon, db):
    r = anon.put("models/anthropic/claude-sonnet-4-5/prices", PRICES)
    assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"
    bad = _put(Client(), "anthropic/claude-sonnet-4-5", PRICES, Authorization="Bearer cx_nope")
    assert bad.status_code == 401
    visitor = _put(_staff(is_staff=False), "anthropic/claude-sonnet-4-5", PRICES)
    assert visitor.status_code == 403 and "not staff" in visitor.json()["error"]["message"]
    assert ModelProfile.objects.get(provider="anthropic", model="claude-sonnet-4-5").prices[
        "input"
    ] == pytest.approx(3)


def test_an_operator_sets_a_price_and_the_next_call_is_charged_it(
    alice, make_session, django_capture_on_commit_callbacks
):
    ModelProfile.objects.create(
        provider="anthropic", model="claude-price-a", prices={"input": 1, "output": 1}
    )
    make_session(id="p-1", model="claude-price-a")
    alice.post("sessions/p-1/messages", {"messages": [{"role": "user", "content": "hi"}]})
    alice.get("sessions/p-1/context")
    usage = {"input_tokens": 1_000, "output_tokens": 100, "cache_read_tokens": 10_000}
    alice.post("sessions/p-1/usage", usage)

    operator = _staff()
    with django_capture_on_commit_callbacks(execute=True):  # as the commit would
        r = _put(operator, "anthropic/claude-price-a", PRICES)
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["prices"] == {**PRICES, "cache_write_1h": 4.0}  # 2 × input, unless given
    assert body["prices_set_by"] == "op" and body["prices_set_at"] is not None

    alice.post("sessions/p-1/messages", {"messages": [{"role": "user", "content": "again"}]})
    alice.get("sessions/p-1/context")
    alice.post("sessions/p-1/usage", usage)
    old, new = ContextCall.objects.filter(session__external_id="p-1").order_by("id")
    assert old.cost_usd == pytest.approx((1_000 * 1 + 10_000 * 1 * 0.1 + 100 * 1) / 1e6)
    assert new.cost_usd == pytest.approx((1_000 * 2 + 10_000 * 0.2 + 100 * 8) / 1e6)
    # The call keeps which profile priced it, and who set the prices.
    assert new.price_source["profile"] == "anthropic/claude-price-a"
    assert new.price_source["set_by"] == "op" and new.price_source["set_at"] is not None
    assert old.price_source["set_at"] is None


def test_an_unknown_model_is_added_with_the_limits_it_resolves_to_today(db):
    r = _put(_staff(), "anthropic/claude-brand-new", {**PRICES, "cache_write_1h": 5})
    assert r.status_code == 201, r.content
    body = r.json()
    # The anthropic default row: a 200,000 window; output a quarter of it.
    assert body["context_window"] == 200_000 and body["max_output_tokens"] == 50_000
    assert body["prices"]["cache_write_1h"] == 5.0
    row = ModelProfile.objects.get(provider="anthropic", model="claude-brand-new")
    assert row.context_window == 200_000 and row.max_output_tokens == 50_000
    # The same PUT again sets the same row (200), with the limits given this time.
    again = _put(_staff(), "anthropic/claude-brand-new", {**PRICES, "context_window": 100_000})
    assert again.status_code == 200 and again.json()["context_window"] == 100_000
    assert ModelProfile.objects.filter(provider="anthropic", model="claude-brand-new").count() == 1


def test_a_provider_default_row_is_priced_through_star(db):
    r = _put(_staff(), "acme/*", PRICES)
    assert r.status_code == 201, r.content
    assert r.json()["model"] == "*" and r.json()["context_window"] == 131_072
    assert ModelProfile.objects.get(provider="acme", model="").prices == PRICES


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**PRICES, "input": -1}, "input"),
        ({**PRICES, "output": "abc"}, "output"),
        ({k: v for k, v in PRICES.items() if k != "cache_read"}, "cache_read"),
        ({**PRICES, "cache_write_5m": 1e9}, "cache_write_5m"),
        ({**PRICES, "bogus": 1}, "bogus"),
        ({**PRICES, "max_output_tokens": 250_000}, "max_output_tokens"),
    ],
)
def test_bad_prices_are_a_422_naming_the_field_and_change_nothing(body, field):
    r = _put(_staff(), "anthropic/claude-sonnet-4-5", body)
    assert r.status_code == 422, r.content
    error = r.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and field in error["message"]
    row = ModelProfile.objects.get(provider="anthropic", model="claude-sonnet-4-5")
    assert row.prices["input"] == pytest.approx(3) and row.prices_set_at is None
    assert row.max_output_tokens == 64_000


def test_a_bad_provider_or_model_name_is_a_422(db):
    r = _put(_staff(), "bad%20provider/claude-x", PRICES)
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "provider"
    r = _put(_staff(), "anthropic/claude%20x", PRICES)
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "model"


def test_an_operator_write_needs_the_csrf_token(db):
    client = _staff(csrf=True)
    refused = _put(client, "anthropic/claude-sonnet-4-5", PRICES)
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]
    client.get("/models/")  # the dashboard page sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    ok = _put(client, "anthropic/claude-sonnet-4-5", PRICES, **{"X-CSRFToken": token})
    assert ok.status_code == 200, ok.content
