"""The operator pages in a real browser (Playwright on Debian's Chromium): an operator edits a
session's policy, watches a compaction's predicted vs actual, and finds the largest
message with the timeline's filter. Same launch, fixtures and session as
test_inspector_browser.py; screenshots go to test-artifacts/."""

from __future__ import annotations

import re

import pytest

from sessions.models import Message, Session
from tests.ui.test_inspector_browser import (  # noqa: F401  (browser: a pytest fixture)
    PASSWORD,
    browser,
    build_via_api,
    login,
    pytestmark,
    shot,
)

# A bad policy is answered 422 (the form again, each bad field named): the browser
# logs that status as a console error, which is expected here and nowhere else.
EXPECTED_CONSOLE = "the server responded with a status of 422"


@pytest.fixture
def page(browser, live_server, transactional_db):  # noqa: F811
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user(username="operator", password=PASSWORD, is_staff=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.base = live_server.url  # type: ignore[attr-defined]
    yield pg
    context.close()
    assert not [e for e in errors if EXPECTED_CONSOLE not in e], errors


# ``pytestmark`` (imported): the ``needs_chromium`` marker.


def _open_session(pg, sid: str) -> None:
    login(pg)
    pg.click(f"text={sid}")
    pg.wait_for_selector("#budget")


def test_operator_edits_a_policy_and_sees_it_in_the_timeline(page, alice):
    sid = build_via_api(alice)
    pg = page
    _open_session(pg, sid)
    pg.get_by_role("link", name=re.compile("Policy: thresholds")).click()
    pg.wait_for_selector("#policy-form")
    shot(pg, "17-policy-page", full_page=True)

    # A bad value: the page says which field, and nothing is stored.
    pg.fill("#pf-thresholds\\.compact_at", "1.5")
    pg.get_by_role("button", name="Save policy").click()
    pg.wait_for_selector("[data-error-for='thresholds.compact_at']")
    assert "less than or equal to 1" in pg.inner_text("[data-error-for='thresholds.compact_at']")
    assert "thresholds" not in Session.objects.get(external_id=sid).policy

    pg.fill("#pf-thresholds\\.compact_at", "0.9")
    pg.select_option("#pf-compaction\\.auto", "false")
    pg.get_by_role("button", name="Save policy").click()
    pg.wait_for_selector("text=Policy saved.")
    row = pg.locator("tr[data-field='thresholds.compact_at'] .policy-effective")
    assert row.inner_text().startswith("0.9")
    session = Session.objects.get(external_id=sid)
    assert session.policy["compaction"] == {"auto": False}
    assert session.policy["thresholds"]["compact_at"] == 0.9

    # The inspector: the new threshold on the budget bar, the audit line in the timeline.
    pg.get_by_role("link", name=sid).click()
    pg.wait_for_selector("#budget")
    assert "compact 0.9" in pg.inner_text("#budget .bar-labels")
    audit = pg.locator("#timeline .audit").first
    audit.wait_for()
    text = audit.inner_text()
    assert "Policy changed" in text and "by operator operator" in text
    assert "compaction.auto" in text and "thresholds.compact_at" in text
    audit.scroll_into_view_if_needed()
    shot(pg, "18-policy-audit-line")


def test_operator_watches_a_compactions_predicted_vs_actual(page, alice, monkeypatch):
    from compaction.models import CompactionRun
    from compaction.services import requests as compaction_requests
    from compaction.services.execute import compaction_execute

    queued: list[str] = []
    monkeypatch.setattr(
        compaction_requests, "enqueue_run", lambda run_id, task_id=None: queued.append(run_id)
    )
    sid = build_via_api(alice)
    pg = page
    _open_session(pg, sid)
    pg.locator("#compact-panel").scroll_into_view_if_needed()
    pg.get_by_role("button", name="Preview").click()
    pg.wait_for_selector(".preview")
    pg.get_by_role("button", name="Compact now").click()
    pg.wait_for_selector(".run-status-text[data-status=queued]")
    # Queued: the preview's figures stay on the page, the actual ones are still to come.
    tokens = pg.locator("#compact-status tr[data-row='Tokens after'] td")
    predicted = tokens.nth(0).inner_text()
    assert predicted and tokens.nth(1).inner_text() == "…"
    shot(pg, "19-predicted-queued")

    compaction_execute(run_id=queued[0])
    pg.wait_for_selector(".run-status-text[data-status=succeeded]", timeout=5_000)
    run = CompactionRun.objects.get(pk=queued[0])
    assert tokens.nth(0).inner_text() == predicted
    assert tokens.nth(1).inner_text() == f"{run.after_tokens:,}"
    summary = pg.locator("#compact-status tr[data-row='Summary by'] td").nth(1).inner_text()
    assert summary == "offline summariser (deterministic, no model)"
    pg.locator("#compact-status").scroll_into_view_if_needed()
    shot(pg, "20-predicted-vs-actual")
    # The history keeps the comparison beside the result.
    pg.click("#tab-compactions")
    pg.wait_for_selector("#compactions .run table.predicted")


def test_operator_finds_the_largest_message_with_the_filter(page, alice):
    sid = build_via_api(alice)
    session = Session.objects.get(external_id=sid)
    largest = Message.objects.filter(session=session).order_by("-token_count", "-seq").first()
    pg = page
    _open_session(pg, sid)
    pg.select_option("#find-kind", "largest")
    pg.get_by_role("button", name="Find").click()
    pg.wait_for_selector(".finder-head")
    first = pg.locator(".finder-results .found").first
    assert first.get_attribute("data-seq") == str(largest.seq)
    assert "Largest messages" in pg.inner_text(".finder-head")
    shot(pg, "21-finder-largest")

    # Back to its place in the timeline, the message marked.
    first.get_by_role("link", name=f"Show #{largest.seq} in the timeline").click()
    pg.wait_for_selector(f"#msg-{largest.seq}.is-target")
    # A tool call's arguments read inline, without a click.
    assert "pytest tests/test_mod" in pg.locator(".call-inline").first.inner_text()

    # Search, then jump to a turn.
    pg.fill("#find-q", "timeout")
    pg.select_option("#find-kind", "")
    pg.get_by_role("button", name="Find").click()
    pg.wait_for_selector(".finder-results .found")
    assert "matching" in pg.inner_text(".finder-head")
    pg.fill("#find-turn", "2")
    pg.get_by_role("button", name="Go").click()
    pg.wait_for_selector("#timeline article.msg-user.is-target")
    assert "Turn 2" in pg.inner_text("#timeline")
