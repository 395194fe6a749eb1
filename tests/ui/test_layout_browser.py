"""Every dashboard page fits a 1,280 px viewport, and the inspector's parts are one click away.

Playwright drives Chromium (see test_inspector_browser): a session with a very long id,
a side session with a long id, and a first user message of 30,000 characters without a
break (as a pasted JSON blob or log line is); each page's document is measured.
"""

from __future__ import annotations

import pytest

from sessions.models import Session
from sessions.services.sessions import session_create
from tests.ui.conftest import build_session
from tests.ui.test_inspector_browser import browser, login, page  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.needs_chromium]

WIDTH = 1280
LONG_ID = "px_" + "9f2c" * 20
UNBROKEN = '{"blob":"' + "A" * 30_000 + '"}'


def seeded(alice_key) -> Session:
    session = build_session(alice_key[0], sid=LONG_ID, turns=14, user_text=UNBROKEN, builds=True)
    side = session_create(
        owner=alice_key[0], data={"id": LONG_ID[:60] + "_side_" + "b" * 50, "model": session.model}
    )
    Session.objects.filter(pk=side.pk).update(
        parent=session, via="proxy", client="Claude Code 2.0.14"
    )
    Session.objects.filter(pk=session.pk).update(
        via="proxy", client="Claude Code 2.0.14", failed_calls=3
    )
    return session


def fits(pg) -> int:
    return pg.evaluate("() => document.documentElement.scrollWidth")


WIDEST = """() => Array.from(document.querySelectorAll('body *'))
  .filter(e => e.getBoundingClientRect().right > %d)
  .slice(0, 6)
  .map(e => e.tagName + '.' + e.className + '#' + e.id + ' ' + Math.round(e.getBoundingClientRect().right))"""


def overflowing(pg) -> list[str]:
    """The first elements that reach past the viewport (what to fix when a page is too wide)."""
    return pg.evaluate(WIDEST % WIDTH)


def test_every_dashboard_page_fits_1280_px(page, alice_key):  # noqa: F811
    session = seeded(alice_key)
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    login(page)
    base = page.base
    pages = {
        "list": "/",
        "inspector": f"/sessions/{session.pk}/",
        "cost": "/cost/",
        "policy": f"/sessions/{session.pk}/policy/",
        "models": "/models/",
        "keys": "/keys/",
    }
    widths = {}
    for name, path in pages.items():
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        widths[name] = (fits(page), overflowing(page))
    # the finder's answer, in the inspector's timeline
    page.goto(base + f"/sessions/{session.pk}/")
    page.fill("#find-q", "blob")
    page.click(".finder-search button[type=submit]")
    page.wait_for_load_state("networkidle")
    widths["find"] = (fits(page), overflowing(page))
    # the context partial, opened in its tab: a 30,000-character line without a break
    page.goto(base + f"/sessions/{session.pk}/#context-anthropic")
    page.wait_for_selector("#tab-anthropic[aria-selected=true]")
    page.wait_for_load_state("networkidle")
    assert "AAAAAAAA" in page.inner_text("#panel")
    widths["context"] = (fits(page), overflowing(page))
    too_wide = {name: w for name, w in widths.items() if w[0] > WIDTH}
    assert not too_wide, too_wide
    assert not missing, missing


def test_the_list_shows_the_first_message_client_origin_and_failed_calls(page, alice_key):  # noqa: F811
    seeded(alice_key)
    login(page)
    row = page.locator("tr", has=page.locator(f"a[title='{UNBROKEN[:200]}']"))
    assert "Claude Code 2.0.14" in row.inner_text()
    assert "proxy" in row.inner_text()
    assert row.locator(".failed-count").inner_text() == "3 failed"
    page.check("#f-failed")
    page.wait_for_url(lambda url: "failed=1" in url)
    page.wait_for_load_state("networkidle")
    assert page.locator(".failed-count").count() == 1


@pytest.mark.parametrize(
    ("hash_", "target"),
    [
        ("budget", "#budget"),
        ("usage", "#usage"),
        ("calls", "#calls"),
        ("views", "#tab-timeline[aria-selected=true]"),
        ("compactions", "#tab-compactions[aria-selected=true]"),
        ("context-openai", "#tab-openai[aria-selected=true]"),
    ],
)
def test_each_inspector_part_is_one_click_away_and_survives_reload(page, alice_key, hash_, target):  # noqa: F811
    session = seeded(alice_key)
    login(page)
    page.goto(page.base + f"/sessions/{session.pk}/")
    page.click(f".jump-bar a[href='#{hash_}']")
    page.wait_for_selector(target)
    assert page.url.endswith("#" + hash_)
    page.reload()
    page.wait_for_selector(target)
    page.wait_for_load_state("networkidle")
    box = page.locator(target).first.bounding_box()
    assert box is not None and -5 <= box["y"] < 900, (
        box,
        page.evaluate(
            "() => [window.scrollY, document.documentElement.scrollHeight, document.querySelectorAll('#calls').length, getComputedStyle(document.body).overflow, getComputedStyle(document.documentElement).overflow]"
        ),
    )  # scrolled into view
