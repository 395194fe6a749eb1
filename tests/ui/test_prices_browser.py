"""In a real browser (Playwright on Debian's Chromium): an operator follows a call's
"no price set" to the Models & prices page, adds the model with its prices, edits one
in its row, and the agent's next call is charged it."""

from __future__ import annotations

import pytest

from prompting.services.policy import forget_profiles
from sessions.models import ContextCall, ModelProfile, Session
from tests.ui.test_inspector_browser import browser, login, page, shot  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.needs_chromium]

USAGE = {"input_tokens": 1_000, "output_tokens": 100, "cache_read_tokens": 10_000}


def _one_call(alice, sid: str, text: str) -> None:
    r = alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.content
    assert alice.get(f"sessions/{sid}/context").status_code == 200
    assert alice.post(f"sessions/{sid}/usage", USAGE).status_code == 200


@pytest.fixture
def _profiles_read_again():
    forget_profiles()
    yield
    forget_profiles()


@pytest.mark.usefixtures("model_profiles", "_profiles_read_again")
def test_operator_sets_a_missing_price_from_the_call_that_lacks_it(page, alice):  # noqa: F811
    pg = page
    sid = "unpriced-run"
    r = alice.post("sessions", {"id": sid, "model": "acme-large", "provider": "acme"})
    assert r.status_code == 201, r.content
    _one_call(alice, sid, "first")
    assert ContextCall.objects.get(session__external_id=sid).cost_usd is None
    login(pg)
    pg.goto(f"{pg.base}/sessions/{Session.objects.get(external_id=sid).pk}/")
    note = pg.locator("[data-testid=unpriced]")
    note.wait_for()
    note.locator("a.no-price", has_text="no price set").click()

    # The Models & prices page, at the new model's form, prefilled.
    pg.wait_for_url("**/models/?provider=acme&model=acme-large#model-acme_2f_acme-large")
    card = pg.locator("#model-acme_2f_acme-large")
    assert "No price set for" in card.inner_text()
    assert card.locator("input[name=model]").input_value() == "acme-large"
    assert card.locator("input[name=context_window]").input_value() == "131072"
    card.locator("input[name=input]").fill("-2")
    for name, value in (("output", "8"), ("cache_write_5m", "2.5"), ("cache_read", "0.2")):
        card.locator(f"input[name={name}]").fill(value)
    card.get_by_role("button", name="Add with these prices").click()
    error = pg.locator(".new-model .field-errors")
    error.wait_for()
    assert "Input: Ensure this value is greater than or equal to 0." in error.inner_text()
    assert not ModelProfile.objects.filter(provider="acme").exists()
    pg.locator(".new-model input[name=input]").fill("2")
    pg.locator(".new-model").get_by_role("button", name="Add with these prices").click()

    # Back on the page at the added row, saved; then one price edited in place.
    pg.wait_for_url("**/models/?saved=*")
    row = pg.locator("tr#model-acme_2f_acme-large")
    row.wait_for()
    assert "saved" in row.inner_text() and "set by operator" in row.inner_text()
    row.locator("input[name=output]").fill("10")
    row.get_by_role("button", name="Save").click()
    # The row swapped in by htmx carries the stored value in its markup.
    row.locator('input[name=output][value="10"]').wait_for()
    shot(pg, "30-models-and-prices")
    assert ModelProfile.objects.get(provider="acme", model="acme-large").prices["output"] == 10

    # The agent's next call is charged the prices; the first keeps having none.
    _one_call(alice, sid, "second")
    first, second = ContextCall.objects.filter(session__external_id=sid).order_by("id")
    assert first.cost_usd is None
    assert second.cost_usd == pytest.approx((1_000 * 2 + 10_000 * 0.2 + 100 * 10) / 1e6)
