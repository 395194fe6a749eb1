"""The real Claude Code CLI (pinned, tests/agents) through the live proxy against the fake Messages API.

The fake answers as an agent (``tests.fakes.claude_code.BashAgent``): many
Bash steps whose outputs together are far larger than the session's 48,000
token window, then a final answer. In CI these run (a missing CLI fails);
elsewhere they skip only when the CLI is not installed.
"""

from __future__ import annotations

import os
import re

import pytest
from django.db import connection

from sessions.models import Message, Session
from tests.fakes.claude_code import FINAL_ANSWER, TASK, BashAgent, claude_binary, run_claude
from tests.live_server import database_url
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY
from tests.proxy.server import proxy_server

pytestmark = [pytest.mark.postgres, *PROXY_DB]

WINDOW = 48_000
STEPS = 12


@pytest.fixture(autouse=True)
def _needs_postgres_and_cli():
    if connection.vendor != "postgresql":
        pytest.skip("a server sharing the test database needs PostgreSQL (DATABASE_URL)")
    claude_binary()


@pytest.fixture
def agent(fake_anthropic):
    fake_anthropic.agent = BashAgent(steps=STEPS)
    fake_anthropic.window = WINDOW
    return fake_anthropic.agent


def start_proxy(tmp_path, fake_anthropic, *, managed: bool):
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(),
        DEBUG="false",
        LOG_LEVEL="WARNING",
        CONTEXTSVC_UPSTREAM_ANTHROPIC_URL=fake_anthropic.base_url,
        CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY=UPSTREAM_KEY if managed else "",
    )
    return proxy_server(env, tmp_path / "proxy.log")


@pytest.fixture
def managed_proxy(tmp_path, fake_anthropic):
    with start_proxy(tmp_path, fake_anthropic, managed=True) as port:
        yield f"http://127.0.0.1:{port}/proxy/anthropic"


def make_window_session(client, sid: str, model: str = "claude-fake-large") -> None:
    body = {"id": sid, "model": model, "context_window": WINDOW, "max_output_tokens": 4000}
    response = client.post("sessions", body)
    assert response.status_code == 201, response.content


def messages_requests(fake):
    return [r for r in fake.messages_requests() if not r.path.startswith("/v1/messages/count")]


def assert_agent_run(fake, sid: str, keys: tuple[str, ...]) -> None:
    requests = messages_requests(fake)
    assert requests, "nothing reached upstream"
    assert [r.error for r in requests if r.status != 200] == []
    assert all(r.headers.get("x-api-key") == UPSTREAM_KEY for r in requests)
    for key in keys:
        assert all(key not in str(r.headers) for r in requests)
    session = Session.objects.get(external_id=sid)
    outputs = list(
        Message.objects.filter(session=session, role="tool")
        .order_by("seq")
        .values_list("content", flat=True)
    )
    steps = [int(m) for text in outputs for m in re.findall(r"STEP-(\d+)-BEGIN", text)]
    assert steps == list(range(STEPS))
    last = requests[-1].body
    text = str(last["messages"])
    assert TASK in text
    assert f"STEP-{STEPS - 1}-BEGIN" in text


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
    assert_agent_run(fake_anthropic, sid, keys=(alice_key[1],))
