"""The real Claude Code CLI through the live proxy: an upstream 529 and a stream cut
mid-way are recorded as failed calls on the session (Claude Code retries them)."""

from __future__ import annotations

import pytest

from fakes.claude_code import BashAgent, run_claude
from sessions.models import ContextCall, Session
from tests.proxy.claude_code_live import WINDOW, make_window_session, start_proxy
from tests.proxy.conftest import PROXY_DB

pytestmark = [pytest.mark.needs_postgres, pytest.mark.needs_agents, *PROXY_DB]


@pytest.fixture
def managed_proxy(tmp_path, fake_anthropic):
    fake_anthropic.agent = BashAgent(steps=1, lines=20)
    fake_anthropic.window = WINDOW
    with start_proxy(tmp_path, fake_anthropic, managed=True) as port:
        yield f"http://127.0.0.1:{port}/proxy/anthropic"


def _run(proxy: str, key: str, home, sid: str):
    return run_claude(
        proxy,
        key,
        home,
        headers={"X-Contextsvc-Session": sid},
        env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"},
    )


def failed_calls(owner) -> list[ContextCall]:
    return list(ContextCall.objects.filter(session__owner=owner, failed=True).order_by("pk"))


def test_claude_code_529_is_a_failed_call(
    tmp_path, managed_proxy, fake_anthropic, alice, alice_key
):
    make_window_session(alice, "cc-529")
    fake_anthropic.fail_next(529, message="Overloaded")
    code, result, err = _run(managed_proxy, alice_key[1], tmp_path / "home", "cc-529")
    assert code == 0, (err, result)  # Claude Code retried; the run completed
    failed = failed_calls(alice_key[0])
    assert [(c.upstream_status, c.client_status, c.error_type) for c in failed] == [
        (529, 529, "overloaded_error")
    ]
    assert failed[0].error_message == "Overloaded"
    counted = sum(Session.objects.filter(owner=alice_key[0]).values_list("failed_calls", flat=True))
    assert counted == 1


def test_claude_code_cut_stream_is_a_failed_call(
    tmp_path, managed_proxy, fake_anthropic, alice, alice_key
):
    make_window_session(alice, "cc-cut")
    fake_anthropic.cut_next(3)
    _run(managed_proxy, alice_key[1], tmp_path / "home", "cc-cut")
    failed = failed_calls(alice_key[0])
    assert len(failed) == 1
    assert failed[0].stream_cut and failed[0].stream_events == 3
    assert failed[0].upstream_status == 200
    counted = sum(Session.objects.filter(owner=alice_key[0]).values_list("failed_calls", flat=True))
    assert counted == 1
