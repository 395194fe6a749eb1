"""The dashboard in a real browser: Playwright (Python) driving Debian's Chromium.

Log in, open a session built through the API, expand a trimmed output and
grep it, run a manual compaction and watch the budget bar shrink, restore a
snapshot. Screenshots of every page go to test-artifacts/ (gitignored); with
CONTEXTSVC_DOCS_SCREENSHOTS=1 (``bin/docs screenshots``) the ones the documentation
shows are also written to docs/img/, where they are committed.

Never ``playwright install``: the browser is $CONTEXTSVC_CHROMIUM
(/usr/bin/chromium). Without it the tests skip, except in CI where they fail.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from contextsvc.settings_env import env_path

# Playwright's sync API runs an event loop in this thread; Django's ORM refuses
# to run in a thread with a running loop unless told it is safe (it is: the
# test drives the browser and the ORM one after the other).
# Predicates are written as functions ("() => ..."): Playwright evals a bare
# expression inside the page, which the dashboard's CSP (no unsafe-eval) refuses.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = str(env_path("CONTEXTSVC_CHROMIUM"))
IN_CI = os.environ.get("CI", "").lower() in ("true", "1")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
DOCS_SHOTS = os.environ.get("CONTEXTSVC_DOCS_SCREENSHOTS", "").lower() in ("1", "true")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]

pytestmark = [pytest.mark.needs_chromium]

PASSWORD = "operator-pass-1"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, live_server, transactional_db):
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
    assert not errors, errors


def shot(pg, name: str, *, docs: str | None = None, **kw) -> None:
    """A screenshot of a page (or of one element: a Locator) in test-artifacts/; one
    named ``docs`` is also the documentation's picture of it (docs/img/<docs>.png)
    when CONTEXTSVC_DOCS_SCREENSHOTS is set."""
    ARTIFACTS.mkdir(exist_ok=True)
    png = pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), **kw)
    if docs and DOCS_SHOTS:
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        (DOCS_IMG / f"{docs}.png").write_bytes(png)


def login(pg) -> None:
    pg.goto(pg.base + "/")  # the dashboard: the login form comes first
    assert "/accounts/login/" in pg.url
    shot(pg, "01-login")
    pg.fill("input[name=username]", "operator")
    pg.fill("input[name=password]", PASSWORD)
    pg.click("button[type=submit]")
    pg.wait_for_url(re.compile(r".*/$"))
    assert pg.evaluate("typeof window.htmx") == "object", "htmx is missing: run bin/setup"


def build_via_api(alice) -> str:
    """A coding session as an agent posts it, through /api/v1; a small tool-output
    budget makes the service trim the oldest outputs."""
    sid = "browser-run"
    response = alice.post(
        "sessions",
        {
            "id": sid,
            "agent": "coder",
            "model": "claude-sonnet-4-5",
            "context_window": 64_000,
            "max_output_tokens": 4_096,
            "buffer_tokens": 2_048,
            "policy": {"tool_output_cache": {"context_budget_tokens": 6_000}},
        },
    )
    assert response.status_code == 201, response.content
    alice.put(
        f"sessions/{sid}/system",
        [
            {
                "name": "base",
                "kind": "base",
                "cacheable": True,
                "content": "You are a careful coding agent. " * 80,
            },
        ],
    )
    alice.put(
        f"sessions/{sid}/tools",
        [
            {
                "name": "bash",
                "description": "Run a shell command",
                "category": "builtin",
                "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
            }
        ],
    )
    for t in range(6):
        lines = 450 if t == 0 else 100  # the first output is long, and the first trimmed
        log = "\n".join(
            f"tests/test_mod{t}.py::test_{i} {'FAILED timeout' if i % 41 == 0 else 'PASSED'}"
            for i in range(lines)
        )
        response = alice.post(
            f"sessions/{sid}/messages",
            {
                "messages": [
                    {"role": "user", "content": f"Step {t}: make the module {t} tests pass."},
                    {
                        "role": "assistant",
                        "content": "Running the tests.",
                        "tool_calls": [
                            {
                                "id": f"call_{t}",
                                "name": "bash",
                                "arguments": {"command": f"pytest tests/test_mod{t}.py"},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": f"call_{t}", "content": log},
                    {"role": "assistant", "content": f"Fixed the timeout in module {t}."},
                ]
            },
        )
        assert response.status_code == 200, response.content
        alice.post(
            f"sessions/{sid}/usage", {"input_tokens": 5_000 + 2_000 * t, "output_tokens": 80}
        )
    return sid


USED = "parseInt(document.querySelector('#budget .card-sub strong').innerText.replace(/,/g, ''))"


def used_tokens(pg) -> int:
    return int(pg.inner_text("#budget .card-sub strong").replace(",", ""))


def test_sessions_list_and_keys_pages(page, alice, make_session):
    pg = page
    make_session(id="alpha-run", agent="planner")
    make_session(id="beta-run", agent="builder")
    login(pg)
    pg.wait_for_selector("text=alpha-run")
    shot(pg, "02-sessions-list")
    # Filters narrow the list without a reload and survive the 5 s refresh.
    pg.fill("#f-q", "beta")
    pg.wait_for_function(
        "() => !document.querySelector('#session-results').innerText.includes('alpha-run')"
    )
    assert "q=beta" in pg.url
    pg.wait_for_timeout(5_600)  # one poll
    assert "alpha-run" not in pg.inner_text("#session-results")
    assert "beta-run" in pg.inner_text("#session-results")
    # Agent keys: create shows the key once; revoke asks first.
    pg.click("nav >> text=Agent keys")
    pg.fill("input[name=name]", "ci-agent")
    pg.click("text=Create key")
    key = pg.input_value("#new-key")
    assert key.startswith("cx_")
    shot(pg, "03-agent-keys")
    pg.once("dialog", lambda d: d.accept())
    pg.locator("tr", has_text="ci-agent").get_by_role("button", name="Revoke").click()
    pg.wait_for_selector("text=is revoked")
    assert pg.locator("#new-key").count() == 0  # gone for good


def test_inspect_expand_grep_compact_restore(page, alice, monkeypatch):
    from compaction.services import requests as compaction_requests
    from compaction.services.execute import compaction_execute

    queued: list[str] = []
    # The worker's part: the page's POST queues the run; this test plays the
    # Celery worker (DESIGN.md: task bodies are called directly in tests).
    monkeypatch.setattr(
        compaction_requests, "enqueue_run", lambda run_id, task_id=None: queued.append(run_id)
    )

    sid = build_via_api(alice)
    pg = page
    login(pg)
    pg.click(f"text={sid}")
    pg.wait_for_selector("#budget")
    assert pg.locator("#budget .bar-track .seg-outputs").count() == 1
    # 6 user turns (< 8): a bar per LLM call, 2 answers per turn
    assert pg.locator("#usage svg .bar").count() == 12
    shot(pg, "04-inspector", docs="inspector", full_page=False)

    # Hover a budget segment: its exact numbers.
    pg.hover("#budget .bar-track .seg-outputs")
    tip = pg.inner_text("#tooltip")
    assert "Tool outputs" in tip and "tokens" in tip and "% of the window" in tip

    # A trimmed output: expand it inline, load more, grep it.
    trimmed = pg.locator("article.msg", has=pg.locator(".vbadge-trimmed")).last
    trimmed.scroll_into_view_if_needed()
    trimmed.get_by_role("button", name="Open full output").click()
    viewer = trimmed.locator(".viewer")
    viewer.wait_for()
    assert viewer.locator(".ol-row").count() == 200
    viewer.get_by_role("button", name=re.compile("Load more")).click()
    pg.wait_for_function("() => document.querySelectorAll('.viewer .ol-row').length === 400")
    viewer.locator("input[name=line]").fill("350")
    viewer.get_by_role("button", name="Jump").click()
    viewer.locator(".ol-row.is-target").wait_for()
    assert viewer.locator(".ol-row.is-target .ln").inner_text() == "350"
    viewer.locator("input[name=pattern]").fill("FAILED")
    viewer.get_by_role("button", name="Search").click()
    viewer.locator(".grep-result").wait_for()
    assert viewer.locator("mark").first.inner_text() == "FAILED"
    assert "11 matching lines" in viewer.inner_text()  # i % 41 == 0 for i < 450
    viewer.scroll_into_view_if_needed()
    shot(pg, "05-output-grep")

    # Manual compaction: preview, submit, queued → done, the bar shrinks.
    before = used_tokens(pg)
    pg.locator("#compact-panel").scroll_into_view_if_needed()
    pg.get_by_role("button", name="Preview").click()
    pg.wait_for_selector(".preview")
    assert "Leave the window" in pg.inner_text(".preview")
    pg.get_by_role("button", name="Compact now").click()
    pg.wait_for_selector(".run-status-text[data-status=queued]")
    shot(pg, "06-compaction-queued")
    assert len(queued) == 1
    compaction_execute(run_id=queued[0])
    pg.wait_for_selector(".run-status-text[data-status=succeeded]", timeout=5_000)
    pg.wait_for_function(f"() => {USED} < {before}")
    after = used_tokens(pg)
    assert after < before
    # The chart reloads on its own request, after the bar: wait for it, then count.
    pg.wait_for_selector("#usage .mark-compaction", timeout=5_000)
    assert pg.locator("#usage .mark-compaction").count() == 1  # the chart reloaded too
    pg.evaluate("window.scrollTo(0, 0)")
    shot(pg, "07-compacted")

    # History, the snapshot's before/after, then restore.
    pg.click("#tab-compactions")
    pg.wait_for_selector("#compactions .run")
    pg.get_by_role("button", name="Before / after").click()
    pg.wait_for_selector(".snapshot")
    pg.locator("#compactions").scroll_into_view_if_needed()
    shot(pg, "08-compaction-history")
    pg.once("dialog", lambda d: d.accept())
    pg.get_by_role("button", name="Restore uncompacted…").click()
    pg.wait_for_selector("text=Restored the uncompacted transcript")
    pg.wait_for_function(f"() => {USED} > {after}")
    # The compaction's snapshot is no longer live: restore it.
    pg.once("dialog", lambda d: d.accept())
    pg.get_by_role("button", name="Restore…").click()
    pg.wait_for_selector("text=Restored snapshot")
    pg.wait_for_function(f"() => {USED} === {after}")

    # The built context, with the cache breakpoints marked.
    pg.click("#tab-anthropic")
    pg.wait_for_selector("#context-anthropic")
    pg.locator(".panel-card").scroll_into_view_if_needed()
    shot(pg, "09-context-anthropic")
    pg.keyboard.press("ArrowRight")  # tabs are keyboard-reachable
    pg.wait_for_selector("#context-openai")
    assert pg.get_attribute("#tab-openai", "aria-selected") == "true"
