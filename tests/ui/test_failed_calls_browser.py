"""In a real browser (Playwright on Debian's Chromium): an operator sees a session's failed
model calls marked in red — the timeline's note, the calls table, the call's detail."""

from __future__ import annotations

import pytest

from sessions.models import ContextCall
from sessions.services.outcome import call_outcome_record
from tests.ui.test_inspector_browser import browser, login, page, shot  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.needs_chromium]


def test_operator_sees_failed_calls_in_red(page, make_dash_session):  # noqa: F811
    pg = page
    session = make_dash_session(sid="flaky-upstream", turns=2, builds=True)
    first, second = ContextCall.objects.filter(session=session).order_by("pk")[:2]
    for call, values in (
        (first, {"upstream_status": 529, "client_status": 529, "error_type": "overloaded_error"}),
        (second, {"upstream_status": 200, "client_status": 200, "stream_cut": True,
                  "stream_events": 5, "error_type": "stream_cut"}),
    ):  # fmt: skip
        values = {"failed": True, "error_message": "Overloaded", **values}
        call_outcome_record(call_id=call.pk, session_pk=session.pk, values=values)
    login(pg)
    pg.locator("tr", has_text="flaky-upstream").locator("a.session-link").click()
    pg.wait_for_selector("#calls")
    assert (
        "2 model calls failed upstream" in pg.locator("[data-testid=timeline-failed]").inner_text()
    )
    rows = pg.locator("#calls-rows tr.call-failed-row")
    assert rows.count() == 2
    red = rows.first.locator("[data-testid=call-failed]")
    colour = red.evaluate("e => getComputedStyle(e).color")
    assert colour not in ("rgb(0, 0, 0)", "")  # the badge's own (red) colour
    assert "stream cut after 5 events" in pg.locator("#calls-rows").inner_text()
    assert "failed 529" in pg.locator("#calls-rows").inner_text()
    pg.locator("#calls-rows button", has_text=f"#{first.pk}").click()
    detail = pg.locator(f"#call-{first.pk}")
    detail.wait_for()
    outcome = detail.locator("[data-testid=call-outcome]").inner_text()
    assert "overloaded_error" in outcome and "Overloaded" in outcome and "client got 529" in outcome
    shot(pg, "30-failed-calls")
