"""In a real browser (Playwright on Debian's Chromium): an operator reads the cost of a
session — in the list, on the inspector's Calls & cost card, and per call."""

from __future__ import annotations

import re

import pytest

from sessions.models import ContextCall
from tests.ui.test_inspector_browser import browser, login, page, shot  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.needs_chromium]


def _session_with_calls(alice) -> tuple[str, float]:
    sid = "costly-run"
    r = alice.post(
        "sessions",
        {
            "id": sid,
            "agent": "coder",
            "model": "claude-sonnet-4-5",
            "context_window": 64_000,
            "max_output_tokens": 4_096,
        },
    )
    assert r.status_code == 201, r.content
    alice.put(
        f"sessions/{sid}/system",
        [{"name": "base", "kind": "base", "content": "You are a careful coding agent. " * 80}],
    )
    for t in range(3):
        alice.post(
            f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": f"step {t}"}]}
        )
        assert alice.get(f"sessions/{sid}/context").status_code == 200
        alice.post(
            f"sessions/{sid}/messages", {"messages": [{"role": "assistant", "content": "done"}]}
        )
        r = alice.post(
            f"sessions/{sid}/usage",
            {
                "input_tokens": 400 + 100 * t,
                "output_tokens": 120,
                "cache_read_tokens": 900 * t,
                "cache_creation_tokens": 900 if t == 0 else 0,
            },
        )
        assert r.status_code == 200, r.content
    total = sum(c.cost_usd for c in ContextCall.objects.filter(session__external_id=sid))
    return sid, total


@pytest.mark.usefixtures("model_profiles")
def test_operator_reads_the_cost_of_a_session(page, alice, make_dash_session):  # noqa: F811
    pg = page
    # Two other sessions share the list (and the documentation's picture of it).
    make_dash_session(sid="refactor-parser", turns=6, tool_lines=300)
    make_dash_session(sid="triage-ci", turns=2, usage=False)
    sid, total = _session_with_calls(alice)
    expected = f"${total:.4f}"
    login(pg)
    row = pg.locator("tr", has_text=sid)
    row.wait_for()
    shot(pg.locator("#main"), "19-sessions-list", docs="sessions-list")
    assert expected in row.locator(".col-cost").inner_text()
    assert "3 calls" in row.locator(".col-cost").inner_text()
    row.locator("a.session-link").click()
    pg.wait_for_selector("#calls")
    card = pg.locator("[data-testid=session-cost]")
    assert card.locator(".cost-total").inner_text() == f"{expected} reported"  # every call reported
    assert "Cache savings" in card.inner_text()
    shot(pg, "20-calls-and-cost")
    # The newest call's row opens what was sent in it, with its reported cost.
    newest = ContextCall.objects.filter(session__external_id=sid).latest("id")
    pg.locator("#calls-rows button", has_text=f"#{newest.pk}").click()
    detail = pg.locator(f"#call-{newest.pk}")
    detail.wait_for()
    text = detail.inner_text()
    assert f"${newest.cost_usd:.4f}" in text and "saved by the cache" in text
    assert re.search(r"Provider-reported input\s+[\d,]+", text)
    shot(detail, "20-call-detail", docs="call-detail")
    # And what was sent at turn 1, by number.
    pg.fill("#call-at-turn", "1")
    pg.locator("form.call-at button").click()
    first = ContextCall.objects.filter(session__external_id=sid).earliest("id")
    pg.wait_for_selector(f"#call-{first.pk}")
    shot(pg, "21-what-was-sent-at-turn-1")
    # A bar of the usage chart opens the call it was drawn from.
    second = ContextCall.objects.filter(session__external_id=sid).order_by("id")[1]
    pg.locator(f'#usage g.bar[data-call="{second.pk}"] rect.hit').click()
    pg.wait_for_selector(f"#call-{second.pk}")
