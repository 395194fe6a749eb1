"""The real Claude Code CLI (pinned, tests/agents) through the live proxy against the fake Messages API.

The fake answers as an agent (``fakes.claude_code.BashAgent``): many
Bash steps whose outputs together are far larger than the session's 48,000
token window, then a final answer. In CI these run (a missing CLI fails);
elsewhere they skip only when the CLI is not installed.
"""

from __future__ import annotations

import pytest

from fakes.anthropic_server import estimate_tokens
from fakes.claude_code import (
    FINAL_ANSWER,
    STEP_MARK,
    TASK,
    BashAgent,
    run_claude,
)
from sessions.models import Message, ModelProfile, Session, ToolOutput
from sessions.outputs.read import output_read_all
from tests.proxy.claude_code_live import (
    WINDOW,
    make_window_session,
    markers,
    messages_requests,
    start_proxy,
)
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY

pytestmark = [pytest.mark.needs_postgres, pytest.mark.needs_agents, *PROXY_DB]

STEPS = 10
LINES = 5_000  # ~24 KB per output: ten of them are far more than the window holds


@pytest.fixture
def agent(fake_anthropic):
    fake_anthropic.agent = BashAgent(steps=STEPS, lines=LINES)
    fake_anthropic.window = WINDOW
    return fake_anthropic.agent


@pytest.fixture
def managed_proxy(tmp_path, fake_anthropic):
    with start_proxy(tmp_path, fake_anthropic, managed=True) as port:
        yield f"http://127.0.0.1:{port}/proxy/anthropic"


def stored_outputs(session: Session) -> list[str]:
    """Each tool result of the session in full, in order: the row's content, or the
    stored output its ref names when the row carries a cut view."""
    texts = []
    for msg in Message.objects.filter(session=session, role="tool").order_by("seq"):
        if msg.view is None:
            texts.append(msg.content)
        else:
            output = ToolOutput.objects.get(session=session, ref=msg.output_ref)
            texts.append(output_read_all(output).decode())
    return texts


def assert_agent_run(fake, session: Session, agent_key: str) -> None:
    """The issue's assertions on one Claude Code run through the proxy."""
    requests = messages_requests(fake)
    assert len(requests) == STEPS + 1
    # The fake rejected nothing and never saw a request over its window.
    assert [r.error for r in requests if r.status != 200] == []
    assert max(estimate_tokens(r.body) for r in requests) <= WINDOW
    # Every upstream call carried the upstream key, never the agent key.
    assert all(r.headers.get("x-api-key") == UPSTREAM_KEY for r in requests)
    assert all(agent_key not in str(r.headers) for r in requests)
    # The session's uncompacted transcript holds every tool output, in order (in
    # full: a view cut at insertion keeps the output in its ref).
    texts = stored_outputs(session)
    steps = [int(m) for text in texts for m in STEP_MARK.findall(text)]
    assert steps == list(range(STEPS))
    assert all(len(text) > LINES * 4 for text in texts)
    # The last upstream request still holds the task and the newest output.
    last = requests[-1].body
    text = str(last["messages"])
    assert TASK in text
    assert f"STEP-{STEPS - 1}-BEGIN" in text
    # What Claude Code sends that the proxy does not manage went through unchanged.
    for request in requests:
        assert "context-management-2025-06-27" in request.headers["anthropic-beta"]
        assert request.headers["x-claude-code-session-id"]
        assert request.body["context_management"]["edits"]
        assert markers(request.body) <= 4
    # Its own tool search is left alone: no deferral of ours, its tools as sent.
    tools = {t["name"]: t for t in last["tools"]}
    assert "ToolSearch" in tools and "tool_search" not in tools
    assert any(t.get("defer_loading") for t in last["tools"])
    # Its mid-conversation system message reached the model as one.
    assert any(m["role"] == "system" for r in requests for m in r.body["messages"])


def test_claude_code_through_the_proxy_with_managed_credentials(
    tmp_path, managed_proxy, fake_anthropic, agent, alice, alice_key
):
    sid = "cc-managed"
    make_window_session(alice, sid)
    code, result, err = run_claude(
        managed_proxy,
        alice_key[1],
        tmp_path / "home",
        headers={"X-Contextsvc-Session": sid},
        env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"},
    )
    assert code == 0, (err, result)
    assert result["result"] == FINAL_ANSWER
    assert_agent_run(fake_anthropic, Session.objects.get(external_id=sid), alice_key[1])
    # Straight to the fake, the same history would not fit: the proxy kept it inside.
    full = sum(len(t) for t in stored_outputs(Session.objects.get(external_id=sid)))
    assert full // 4 > WINDOW


def test_claude_code_through_the_proxy_with_pass_through_credentials(
    tmp_path, fake_anthropic, agent, alice_key
):
    # No session is named: Claude Code's own session id names it, created on
    # first use with the window of the model's profile.
    ModelProfile.objects.create(
        provider="anthropic",
        model="claude-fake-small",
        context_window=WINDOW,
        max_output_tokens=4000,
    )
    with start_proxy(tmp_path, fake_anthropic, managed=False) as port:
        code, result, err = run_claude(
            f"http://127.0.0.1:{port}/proxy/anthropic",
            UPSTREAM_KEY,
            tmp_path / "home",
            model="claude-fake-small",
            headers={"X-Contextsvc-Key": alice_key[1]},
            env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"},
        )
    assert code == 0, (err, result)
    assert result["result"] == FINAL_ANSWER
    client_id = messages_requests(fake_anthropic)[0].headers["x-claude-code-session-id"]
    session = Session.objects.get(external_id=f"cc_{client_id}")
    assert session.context_window == WINDOW and session.parent_id is None
    assert_agent_run(fake_anthropic, session, alice_key[1])
