"""Codex CLI through the live proxy when the upstream fails: an overloaded (529)
or broken (500) answer, and a stream cut mid-way. Codex retries and finishes;
each failed attempt is a failed call on the session, with the upstream's status
and error, and the session counts them."""

from __future__ import annotations

import threading

import pytest

from fakes.codex import FINAL, ShellLoop, run_codex
from fakes.responses_server import FakeResponses
from sessions.models import ContextCall, Session
from sessions.services.sessions import session_create
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY
from tests.proxy.server import live_proxy

pytestmark = [pytest.mark.needs_postgres, pytest.mark.needs_agents, pytest.mark.slow, *PROXY_DB]

CUT_AFTER = 3  # stream frames the fake sends before it drops the connection


class CutOnce:
    """The loop's replies, with only the first streamed answer cut after ``CUT_AFTER`` frames."""

    def __init__(self, loop: ShellLoop, fake: FakeResponses) -> None:
        self.loop, self.fake, self.first = loop, fake, True
        self.lock = threading.Lock()

    def __call__(self, body):
        with self.lock:
            self.fake.cut_stream_after = CUT_AFTER if self.first else None
            self.first = False
        return self.loop(body)


@pytest.fixture
def upstream():
    with FakeResponses(api_key=UPSTREAM_KEY) as fake:
        fake.responder = ShellLoop(1, lines=20)
        yield fake


@pytest.fixture
def proxy(tmp_path, upstream):
    with live_proxy(
        tmp_path,
        CONTEXTSVC_UPSTREAM_OPENAI_URL=f"{upstream.base_url}/v1",
    ) as port:
        yield f"http://127.0.0.1:{port}/proxy/openai/v1"


def run(proxy, alice_key, tmp_path, sid: str):
    session_create(
        owner=alice_key[0],
        data={
            "id": sid,
            "model": "gpt-5.1-codex",
            "context_window": 48_000,
            "max_output_tokens": 4_000,
        },
    )
    return run_codex(
        base_url=proxy,
        api_key=UPSTREAM_KEY,
        task="Run the shell steps you are given, then report.",
        scratch=tmp_path,
        headers={"X-Contextsvc-Key": alice_key[1], "X-Contextsvc-Session": sid},
    )


def calls(sid: str) -> list[ContextCall]:
    return list(ContextCall.objects.filter(session__external_id=sid).order_by("pk"))


@pytest.mark.parametrize("status", [529, 500])
def test_codex_retries_an_upstream_error_and_the_failed_calls_are_recorded(
    proxy, upstream, alice_key, tmp_path, status
):
    sid = f"codex-fail-{status}"
    upstream.fail_next(status)
    upstream.fail_next(status)
    done = run(proxy, alice_key, tmp_path, sid)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.final_message() == FINAL  # its retries got through
    records = calls(sid)
    failed = [r for r in records if r.failed]
    assert len(failed) == 2, [(r.upstream_status, r.error_type) for r in records]
    for record in failed:
        assert (record.upstream_status, record.client_status) == (status, status)
        assert record.error_type == "server_error"
        assert record.error_message == f"fake failure {status}"
        assert not record.stream_cut
    assert all(r.upstream_status == 200 and r.client_status == 200 for r in records if not r.failed)
    assert len(records) > len(failed)  # the retried calls completed
    assert Session.objects.get(external_id=sid).failed_calls == 2


def test_codex_meets_a_cut_stream_and_the_cut_call_is_recorded(
    proxy, upstream, alice_key, tmp_path
):
    sid = "codex-fail-cut"
    upstream.responder = CutOnce(upstream.responder, upstream)
    done = run(proxy, alice_key, tmp_path, sid)
    records = calls(sid)
    cut = [r for r in records if r.stream_cut]
    assert len(cut) == 1, [(r.upstream_status, r.stream_events, r.failed) for r in records]
    assert cut[0].failed and cut[0].upstream_status == 200
    assert cut[0].stream_events == CUT_AFTER
    assert Session.objects.get(external_id=sid).failed_calls == 1
    # Codex reconnects after the cut: the run still ends with the final answer.
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.final_message() == FINAL
