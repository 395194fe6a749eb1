"""The real Claude Code through the live proxy meets an upstream 529, a 500 and a cut
stream; then an operator opens the inspector in Chromium: the failed calls are marked,
and a call's detail shows the client's request beside what was sent — the Bash outputs
sent as views with their refs, the note after the last item, the fields passed."""

from __future__ import annotations

import pytest

from fakes.claude_code import BashAgent, run_claude
from sessions.models import ContextCall, Message, Session
from tests.proxy.claude_code_live import WINDOW, start_proxy
from tests.proxy.conftest import PROXY_DB
from tests.ui.test_inspector_browser import browser, login, page, shot  # noqa: F401 (fixtures)

pytestmark = [
    pytest.mark.needs_postgres,
    pytest.mark.needs_agents,
    pytest.mark.needs_chromium,
    *PROXY_DB,
]


def test_claude_code_failures_then_the_call_detail_side_by_side(
    tmp_path,
    fake_anthropic,
    alice,
    alice_key,
    page,  # noqa: F811
):
    fake_anthropic.agent = BashAgent(steps=6, lines=2500)
    fake_anthropic.window = WINDOW
    body = {"id": "cc-account", "model": "claude-fake-large", "context_window": WINDOW,
            "max_output_tokens": 4000}  # fmt: skip
    assert alice.post("sessions", body).status_code == 201
    fake_anthropic.fail_next(529, message="Overloaded")
    fake_anthropic.fail_next(500, message="Internal error")
    fake_anthropic.cut_next(3)
    with start_proxy(tmp_path, fake_anthropic, managed=True) as port:
        code, result, err = run_claude(
            f"http://127.0.0.1:{port}/proxy/anthropic",
            alice_key[1],
            tmp_path / "home",
            headers={"X-Contextsvc-Session": "cc-account"},
            env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"},
        )
    assert code == 0, (err, result)  # Claude Code retried each failure and finished
    session = Session.objects.get(external_id="cc-account")
    failed = ContextCall.objects.filter(session=session, failed=True)
    assert {c.upstream_status for c in failed} >= {529, 500}
    assert failed.filter(stream_cut=True).exists()
    views = Message.objects.filter(session=session, role="tool").exclude(view_state="full")
    assert views.count() >= 2  # the 2,500-line outputs went as views
    # Past 80 % of the usable window a note follows the last item (the usage note).
    noted = [
        c
        for c in ContextCall.objects.filter(session=session, failed=False, request__isnull=False)
        if any(a["what"] == "note" for a in c.breakdown["added"])
    ]
    assert noted
    call = noted[-1]
    client = call.request["client"]
    assert client["same_as_previous"] > 0 and "Bash" in client["tools"]["names"]

    pg = page
    login(pg)
    pg.locator("tr", has_text="cc-account").locator("a.session-link").click()
    pg.wait_for_selector("#calls")
    assert pg.locator("#calls-rows tr.call-failed-row").count() >= 3
    pg.locator("#calls-rows button", has_text=f"#{call.pk}").click()
    account = pg.locator("[data-testid=call-account]")
    account.wait_for()
    sent = account.locator("[data-testid=account-sent]").inner_text()
    shown = [ref for ref in views.values_list("output_ref", flat=True) if ref in sent]
    assert len(shown) >= 2, sent
    assert "view" in sent and "Bash" in sent
    assert "a note after the last item" in sent
    assert "passed untouched" in sent and "max_tokens" in sent
    side = account.locator("[data-testid=account-client]").inner_text()
    assert (
        f"{client['messages']} · the first {client['same_as_previous']} as in its previous" in side
    )
    width = pg.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280
    shot(pg, "31-call-account")
