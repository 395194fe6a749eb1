"""Codex CLI (pinned, ``exec --json``) through the live proxy, against the fake Responses upstream.

A long ``exec_command`` loop whose history outgrows the session's window ends
with the final answer: no upstream rejection, the upstream key only, every
tool output in the transcript, reasoning returned verbatim (the fake refuses
an ``encrypted_content`` it did not issue). And a run whose own compaction
limit is low: Codex's checkpoint request gets our summary.
"""

from __future__ import annotations

import pytest

from compaction.models import CompactionRun
from fakes.codex import FINAL, ShellLoop, run_codex
from fakes.responses_server import FakeResponses
from sessions.models import ContextCall, Session
from sessions.services.sessions import session_create
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY
from tests.proxy.server import live_proxy
from tests.proxy.test_claude_code import stored_outputs

pytestmark = [pytest.mark.needs_postgres, pytest.mark.needs_agents, pytest.mark.slow, *PROXY_DB]


@pytest.fixture
def upstream():
    with FakeResponses(api_key=UPSTREAM_KEY, window=60_000) as fake:
        yield fake


@pytest.fixture
def proxy(tmp_path, upstream):
    with live_proxy(
        tmp_path,
        CONTEXTSVC_UPSTREAM_OPENAI_URL=f"{upstream.base_url}/v1",
    ) as port:
        yield f"http://127.0.0.1:{port}/proxy/openai/v1"


def test_codex_long_loop_through_the_proxy_stays_in_its_window(
    proxy, upstream, alice_key, tmp_path
):
    steps = 26
    upstream.responder = ShellLoop(steps)
    session_create(
        owner=alice_key[0],
        data={
            "id": "codex-loop",
            "model": "gpt-5.1-codex",
            "context_window": 48_000,
            "max_output_tokens": 4_000,
        },
    )
    run = run_codex(
        base_url=proxy,
        api_key=UPSTREAM_KEY,
        task="Run the shell steps you are given, then report.",
        scratch=tmp_path,
        headers={"X-Contextsvc-Key": alice_key[1], "X-Contextsvc-Session": "codex-loop"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.final_message() == FINAL
    requests = upstream.responses_requests()
    assert len(requests) >= steps + 1
    assert all(r.status == 200 for r in requests), [r.error for r in requests if r.status != 200]
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in requests)
    assert not any("x-contextsvc-key" in r.headers for r in requests)
    assert all(r.headers.get("session-id") for r in requests)  # Codex's headers pass through
    # reasoning went back verbatim: the last request carries items the fake issued
    reasoning = [i for i in requests[-1].body["input"] if i.get("type") == "reasoning"]
    assert reasoning and all(i["encrypted_content"] in upstream.issued for i in reasoning)
    session = Session.objects.get(external_id="codex-loop")
    texts = stored_outputs(session)  # in full: a cut view keeps the output in its ref
    assert len(texts) == steps
    for k in range(steps):
        assert any(f"STEP-{k}" in text for text in texts), k
    # sent directly, the same history would not fit the fake's window
    assert sum(len(text) for text in texts) // 4 > upstream.window
    # Each call's record keeps Codex's request beside what was sent
    # (docs/proxy.md#what-changed): its input grew by the turn since the last call,
    # its fields passed, the outputs that went as views listed by seq.
    accounts = [
        c.request
        for c in ContextCall.objects.filter(session=session, request__isnull=False).order_by("pk")
    ]
    assert len(accounts) >= steps + 1
    later = accounts[-1]["client"]
    assert 0 < later["same_as_previous"] < later["messages"] and later["new_seqs"]
    assert "exec_command" in " ".join(later["tools"]["names"])
    changes = accounts[-1]["changes"]["fields"]
    assert "input" in changes["replaced"] and "model" in changes["passed"]
    views = [
        c.breakdown["sent"]["views"]
        for c in ContextCall.objects.filter(session=session).order_by("pk")
    ]
    assert any(v for v in views)  # some outputs went as views


def test_codex_own_compaction_gets_our_summary(proxy, upstream, alice_key, tmp_path):
    upstream.responder = ShellLoop(10, lines=2000)
    run = run_codex(
        base_url=proxy,
        api_key=UPSTREAM_KEY,
        task="Run the shell steps you are given, then report.",
        scratch=tmp_path,
        headers={"X-Contextsvc-Key": alice_key[1], "X-Contextsvc-Session": "codex-compacts"},
        settings={"model_auto_compact_token_limit": 20_000, "model_context_window": 60_000},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.final_message() == FINAL
    session = Session.objects.get(external_id="codex-compacts")
    client_runs = CompactionRun.objects.filter(
        session=session, trigger=CompactionRun.Trigger.CLIENT, status="succeeded"
    )
    assert client_runs.exists()
    # Codex restarted from our summary: a later upstream call carries it in Codex's own message
    sent = [str(r.body["input"]) for r in upstream.responses_requests() if r.body]
    restarted = [text for text in sent if "Another language model started" in text]
    assert restarted and "(offline summariser)" in restarted[-1]  # our summariser's words
    assert not any("CONTEXT CHECKPOINT COMPACTION" in text for text in sent)  # never upstream
