"""The Content-Security-Policy in a real browser: every main page, its htmx
interactions and the API's Swagger page run with no violation reported.

Chromium reports each blocked script, style, eval or resource as a
``securitypolicyviolation`` event and a console error; both are collected
(the event through a binding added before any page script runs) and must stay
empty. A deliberate inline script first proves the collector sees violations.
"""

from __future__ import annotations

import re

import pytest

from tests.ui.test_inspector_browser import (  # noqa: F401 (browser is a fixture)
    PASSWORD,
    browser,
    build_via_api,
    login,
    pytestmark,
)

REPORTER = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolation({
    directive: e.effectiveDirective,
    blocked: e.blockedURI,
    sample: e.sample,
    page: location.pathname,
  });
});
"""


class Watched:
    """A page plus what the browser reported on it."""

    def __init__(self, context) -> None:
        self.violations: list[dict] = []
        self.console_errors: list[str] = []
        context.expose_binding("__cspViolation", lambda _source, v: self.violations.append(v))
        context.add_init_script(REPORTER)
        self.page = context.new_page()
        self.page.on("pageerror", lambda e: self.console_errors.append(str(e)))
        self.page.on(
            "console",
            lambda m: self.console_errors.append(m.text) if m.type == "error" else None,
        )

    def assert_clean(self) -> None:
        # The binding is asynchronous: give queued reports a moment to arrive.
        self.page.wait_for_timeout(200)
        assert self.violations == [], self.violations
        assert self.console_errors == [], self.console_errors


@pytest.fixture
def watched(browser, live_server, transactional_db):  # noqa: F811
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user(username="operator", password=PASSWORD, is_staff=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    w = Watched(context)
    w.page.base = live_server.url  # type: ignore[attr-defined]
    yield w
    context.close()


def test_the_collector_sees_a_blocked_inline_script(watched):
    pg = watched.page
    response = pg.goto(pg.base + "/accounts/login/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    pg.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.__ran = 1'; document.body.append(s); }"
    )
    pg.wait_for_timeout(200)
    assert pg.evaluate("() => window.__ran") is None  # blocked, not run
    assert [v["directive"] for v in watched.violations] == ["script-src-elem"]
    assert any("Content Security Policy" in text for text in watched.console_errors)


def test_dashboard_pages_and_htmx_interactions_pass_the_policy(watched, alice, make_session):
    pg = watched.page
    make_session(id="alpha-run", agent="planner")
    sid = build_via_api(alice)
    login(pg)

    # Sessions list: the live filter (htmx GET on input) still narrows the list.
    pg.wait_for_selector("text=alpha-run")
    pg.fill("#f-q", "browser")
    pg.wait_for_function(
        "() => !document.querySelector('#session-results').innerText.includes('alpha-run')"
    )
    assert "q=browser" in pg.url

    # Agent keys: htmx POST; the new key's field selects itself on focus
    # (data-select-on-focus, once an inline onfocus handler).
    pg.click("nav >> text=Agent keys")
    pg.fill("input[name=name]", "csp-agent")
    pg.click("text=Create key")
    pg.wait_for_selector("#new-key")
    pg.focus("#new-key")
    assert pg.evaluate(
        "() => { const f = document.getElementById('new-key');"
        " return f.value.length > 0 && f.selectionStart === 0"
        " && f.selectionEnd === f.value.length; }"
    )

    # A session: the inspector, an output opened and closed again (data-close-more).
    pg.goto(pg.base + "/")
    pg.click(f"text={sid}")
    pg.wait_for_selector("#budget")
    trimmed = pg.locator("article.msg", has=pg.locator(".vbadge-trimmed")).last
    trimmed.scroll_into_view_if_needed()
    trimmed.get_by_role("button", name="Open full output").click()
    viewer = trimmed.locator(".viewer")
    viewer.wait_for()
    trimmed.get_by_role("button", name="Close the output viewer").click()
    viewer.wait_for(state="detached")

    # The budget card's 10 s poll (data-poll-visible, once an htmx trigger
    # filter) tells the server the newest message the timeline shows
    # (data-send-seen, once an htmx js: value); a message posted since brings the
    # "new" pill, which reloads the timeline tab (data-show-timeline, once an
    # inline onclick).
    newest = pg.get_attribute("#timeline", "data-newest")
    response = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "One more."}]}
    )
    assert response.status_code == 200, response.content
    with pg.expect_request(re.compile(rf".*/budget/\?seen={newest}$"), timeout=15_000):
        pass
    pill = pg.locator("#new-messages .pill-new")
    pill.wait_for()
    assert "1 new message" in pill.inner_text()
    with pg.expect_request(re.compile(r".*/timeline/")):
        pill.click()
    pill.wait_for(state="detached")
    pg.wait_for_selector("text=One more.")

    # The other panels render their content under the policy too.
    pg.click("#tab-anthropic")
    pg.wait_for_selector("#context-anthropic")
    watched.assert_clean()


def test_locked_out_page_and_api_docs_pass_the_policy(watched, settings):
    pg = watched.page
    pg.goto(pg.base + "/accounts/login/")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        pg.fill("input[name=username]", "operator")
        pg.fill("input[name=password]", "wrong")
        pg.click("button[type=submit]")
        pg.wait_for_load_state()
    assert "Sign-in locked" in pg.inner_text("#lockout")
    # The lockout page answers 429, which Chromium logs as a failed load.
    assert watched.console_errors[-1:] == [
        "Failed to load resource: the server responded with a status of 429 (Too Many Requests)"
    ]
    watched.console_errors.clear()
    watched.assert_clean()

    # Swagger UI (ninja's bundled files): it renders the operations.
    pg.goto(pg.base + "/api/v1/docs")
    pg.wait_for_selector(".opblock", timeout=20_000)
    assert pg.locator(".opblock").count() > 5
    watched.assert_clean()
