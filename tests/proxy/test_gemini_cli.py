"""Gemini CLI (pinned, headless, offline) through the live proxy, against the fake Gemini server.

A scripted multi-step shell task: every request the CLI makes goes through
the proxy to the fake (which refuses what the real API refuses), the CLI
finishes with the answer, and the session's transcript holds each step once.
"""

from __future__ import annotations

import pytest

from compaction.models import CompactionRun
from fakes.gemini_cli import ShellSteps, run_gemini
from fakes.gemini_server import FakeGemini
from fakes.shell_steps import FINAL, STEP_DONE
from proxy.models import ClientCompaction
from sessions.models import ContextCall, Message, Session, ToolOutput
from sessions.outputs.read import output_read_all
from sessions.services.sessions import session_create
from tests.proxy.conftest import PROXY_DB
from tests.proxy.server import live_proxy

pytestmark = [pytest.mark.needs_postgres, pytest.mark.needs_agents, *PROXY_DB]

KEY = "gemini-upstream-key"
TASK = "Run the shell steps you are given, then report."


@pytest.fixture
def upstream():
    with FakeGemini(api_key=KEY) as fake:
        yield fake


@pytest.fixture
def proxy(tmp_path, upstream):
    with live_proxy(
        tmp_path,
        CONTEXTSVC_UPSTREAM_GEMINI_URL=upstream.base_url,
    ) as port:
        yield f"http://127.0.0.1:{port}/proxy/gemini"


def run_task(proxy, upstream, alice_key, tmp_path, sid: str, *, session: dict | None = None, **run):
    """A session ``sid`` (400,000-token window unless ``session`` says otherwise), the CLI run
    on the task through the proxy, finishing with the answer; upstream's requests."""
    data = {"id": sid, "model": "gemini-fake-pro", "context_window": 400_000,
            "max_output_tokens": 4_000, **(session or {})}  # fmt: skip
    session_create(owner=alice_key[0], data=data)
    headers = {"X-Contextsvc-Key": alice_key[1], "X-Contextsvc-Session": sid}
    code, result, err = run_gemini(proxy, KEY, tmp_path / "home", TASK, headers=headers, **run)
    assert code == 0, err[-2000:]
    assert result is not None and result["response"].strip() == FINAL
    return upstream.generate_requests()


def test_gemini_cli_runs_its_shell_steps_through_the_proxy(proxy, upstream, alice_key, tmp_path):
    steps = 4
    upstream.agent = ShellSteps(steps=steps, lines=30)
    requests = run_task(proxy, upstream, alice_key, tmp_path, "gemini-run")
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


def full_text(message: Message) -> str:
    """A tool message's output in full: its content, or its ref's stored output when cut."""
    if message.view is None or not message.output_ref:
        return message.content or ""
    stored = ToolOutput.objects.get(session_id=message.session_id, ref=message.output_ref)
    return output_read_all(stored).decode()


def steps_stored(session: Session) -> list[int]:
    """The steps whose output the session's record holds, in order (with repeats)."""
    outputs = Message.objects.filter(session=session, role="tool").order_by("seq")
    return [int(k) for o in outputs for k in STEP_DONE.findall(full_text(o))]


def failed_calls(*sessions: Session) -> list[tuple]:
    records = ContextCall.objects.filter(session__in=sessions, source="proxy")
    return [
        (r.upstream_status, r.error_type, r.error_message[:80], r.stream_cut)
        for r in records
        if r.failed
    ]


def test_gemini_cli_runs_a_long_task_in_a_window_that_compacts(
    proxy, upstream, alice_key, tmp_path
):
    """The CLI picks its model (a routing request first), the proxy compacts on the way."""
    steps, window = 16, 28_000
    upstream.agent = ShellSteps(steps=steps, lines=2_000)
    upstream.window = window  # the fake refuses what would not fit, as the real API does
    limits = {"context_window": window, "max_output_tokens": 2_000, "buffer_tokens": 2_000,
              "policy": {"tool_deferral_threshold": 1.0}}  # fmt: skip
    requests = run_task(
        proxy, upstream, alice_key, tmp_path, "gemini-long", session=limits, model=None, timeout=240
    )
    assert [r.error for r in requests if r.status != 200] == []
    # Its routing question reached upstream as it sent it: no tools of ours added.
    routing = [r for r in requests if "responseJsonSchema" in r.body.get("generationConfig", {})]
    assert routing and all("tools" not in r.body for r in routing)

    session = Session.objects.get(external_id="gemini-long")
    assert CompactionRun.objects.filter(session=session).count() >= 1
    calls = Message.objects.filter(session=session, role="assistant").order_by("seq")
    commands = [c["arguments"]["command"] for m in calls for c in m.tool_calls or ()]
    assert commands == [upstream.agent.command(k) for k in range(steps)]  # each step once
    assert steps_stored(session) == list(range(steps))
    # Its routing question went to a side session of its own, not into the task's record.
    sides = list(Session.objects.filter(parent=session))
    assert sides and not ClientCompaction.objects.filter(session=session).exists()
    main_text = " ".join(str(c) for c in Message.objects.filter(session=session).values_list(
        "content", flat=True))  # fmt: skip
    assert "complexity_score" not in main_text
    assert not failed_calls(session, *sides)


def test_gemini_cli_compresses_its_own_history_and_the_proxy_keeps_everything(
    proxy, upstream, alice_key, tmp_path
):
    """Its own compression (past a threshold of its window) is a client compaction."""
    steps = 5
    upstream.agent = ShellSteps(steps=steps, lines=30)
    requests = run_task(
        proxy, upstream, alice_key, tmp_path, "gemini-self", compression_threshold=0.0001
    )
    assert [r.error for r in requests if r.status != 200] == []
    snapshots = [r for r in requests if "<state_snapshot>" in str(r.body["contents"][-1])]
    assert snapshots  # it did compress, through the proxy

    session = Session.objects.get(external_id="gemini-self")
    assert ClientCompaction.objects.filter(session=session).count() >= 1
    # Nothing stored is lost: every step's output is in the record.
    assert set(steps_stored(session)) == set(range(steps))
    # Its summary requests went to a side session, not into the task's record.
    sides = list(Session.objects.filter(parent=session))
    side_users = Message.objects.filter(session__in=sides, role="user")
    assert any("<state_snapshot>" in str(c) for c in side_users.values_list("content", flat=True))
    main_users = Message.objects.filter(session=session, role="user")
    assert not any(
        "<state_snapshot>" in str(c) for c in main_users.values_list("content", flat=True)
    )
    assert not failed_calls(session, *sides)
