"""Gemini CLI (pinned, headless, offline) through the live proxy, against the fake Gemini server.

A scripted multi-step shell task: every request the CLI makes goes through
the proxy to the fake (which refuses what the real API refuses), the CLI
finishes with the answer, and the session's transcript holds each step once.
"""

from __future__ import annotations

import os

import pytest

from fakes.gemini_cli import FINAL, ShellSteps, run_gemini
from fakes.gemini_server import FakeGemini
from sessions.models import ContextCall, Message, Session
from sessions.services.sessions import session_create
from tests.live_server import database_url
from tests.proxy.conftest import PROXY_DB
from tests.proxy.server import proxy_server

pytestmark = [pytest.mark.needs_postgres, pytest.mark.needs_agents, *PROXY_DB]

KEY = "gemini-upstream-key"
TASK = "Run the shell steps you are given, then report."


@pytest.fixture
def upstream():
    with FakeGemini(api_key=KEY) as fake:
        yield fake


@pytest.fixture
def proxy(tmp_path, upstream):
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(),
        DEBUG="false",
        LOG_LEVEL="WARNING",
        CONTEXTSVC_UPSTREAM_GEMINI_URL=upstream.base_url,
    )
    with proxy_server(env, tmp_path / "proxy.log") as port:
        yield f"http://127.0.0.1:{port}/proxy/gemini"


def test_gemini_cli_runs_its_shell_steps_through_the_proxy(proxy, upstream, alice_key, tmp_path):
    steps = 4
    upstream.agent = ShellSteps(steps=steps, lines=30)
    session_create(
        owner=alice_key[0],
        data={"id": "gemini-run", "model": "gemini-fake-pro", "context_window": 400_000,
              "max_output_tokens": 4_000},
    )  # fmt: skip
    code, result, err = run_gemini(
        proxy,
        KEY,
        tmp_path / "home",
        TASK,
        headers={"X-Contextsvc-Key": alice_key[1], "X-Contextsvc-Session": "gemini-run"},
    )
    assert code == 0, err[-2000:]
    assert result is not None and result["response"].strip() == FINAL
    requests = upstream.generate_requests()
    assert len(requests) >= steps + 1
    assert all(r.status == 200 for r in requests), [r.body for r in requests if r.status != 200][:1]
    assert not any("x-contextsvc-key" in r.headers for r in requests)  # ours stays here
    session = Session.objects.get(external_id="gemini-run")
    calls = list(Message.objects.filter(session=session, role="assistant").order_by("seq"))
    commands = [c["arguments"]["command"] for m in calls for c in m.tool_calls or ()]
    assert commands == [upstream.agent.command(k) for k in range(steps)]  # each step once
    outputs = Message.objects.filter(session=session, role="tool").order_by("seq")
    assert [f"STEP-{k}-DONE" in str(o.content) for k, o in enumerate(outputs)] == [True] * steps
    records = ContextCall.objects.filter(session=session, source="proxy")
    failed = [
        (r.upstream_status, r.error_type, r.error_message[:80], r.stream_cut)
        for r in records
        if r.failed
    ]
    assert records.count() >= steps + 1 and not failed, failed
