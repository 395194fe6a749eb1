"""The real Claude Code CLI through the live proxy where the model or the window says no.

- A model whose profile takes no mid-conversation system messages (the fake
  upstream rejects them for it, as the API does for models before Claude Opus
  4.8): Claude Code still sends its system messages; the proxy stores them as
  such and sends them as marked user reminders, so the run completes and the
  fake rejects nothing.
- A window that cannot hold Claude Code's system prompt, tools and its
  default ``max_tokens`` (32,000): the proxy answers the provider-shaped 400
  naming the numbers and ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, Claude Code shows
  it as its error, and the session is left as it was.
"""

from __future__ import annotations

import pytest
from django.db import connection

from contextsvc.engine.build import SYSTEM_REMINDER_HEADER
from sessions.models import Message, ModelProfile, Session
from tests.fakes.claude_code import FINAL_ANSWER, BashAgent, claude_binary, run_claude
from tests.proxy.claude_code_live import WINDOW, make_window_session, messages_requests, start_proxy
from tests.proxy.conftest import PROXY_DB

pytestmark = [pytest.mark.postgres, *PROXY_DB]

OLD_MODEL = "claude-fake-old"


@pytest.fixture
def managed_proxy(tmp_path, fake_anthropic):
    with start_proxy(tmp_path, fake_anthropic, managed=True) as port:
        yield f"http://127.0.0.1:{port}/proxy/anthropic"


@pytest.fixture(autouse=True)
def _needs_postgres_and_cli():
    if connection.vendor != "postgresql":
        pytest.skip("a server sharing the test database needs PostgreSQL (DATABASE_URL)")
    claude_binary()


def test_system_messages_to_a_model_that_rejects_them_travel_as_reminders(
    tmp_path,
    managed_proxy,
    fake_anthropic,
    alice,
    alice_key,
):
    ModelProfile.objects.create(
        provider="anthropic", model=OLD_MODEL, context_window=WINDOW, mid_system_messages=False
    )
    fake_anthropic.no_mid_system = (OLD_MODEL,)
    fake_anthropic.agent = BashAgent(steps=3, lines=200)
    make_window_session(alice, "cc-old", model=OLD_MODEL)
    code, result, err = run_claude(
        managed_proxy,
        alice_key[1],
        tmp_path / "home",
        model=OLD_MODEL,
        headers={"X-Contextsvc-Session": "cc-old"},
        env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"},
    )
    assert code == 0, (err, result)
    assert result["result"] == FINAL_ANSWER
    requests = messages_requests(fake_anthropic)
    assert [r.error for r in requests if r.status != 200] == []
    assert all(m["role"] != "system" for r in requests for m in r.body["messages"])
    assert SYSTEM_REMINDER_HEADER in str(requests[-1].body["messages"])
    session = Session.objects.get(external_id="cc-old")
    assert Message.objects.filter(session=session, role="system").exists()


def test_a_window_too_small_for_claude_codes_max_tokens_is_its_error(
    tmp_path,
    managed_proxy,
    fake_anthropic,
    alice,
    alice_key,
):
    fake_anthropic.agent = BashAgent(steps=1)
    body = {
        "id": "cc-tiny",
        "model": "claude-fake-large",
        "context_window": 30_000,
        "buffer_tokens": 1_000,
        "max_output_tokens": 1_000,
    }
    assert alice.post("sessions", body).status_code == 201
    code, result, err = run_claude(
        managed_proxy,
        alice_key[1],
        tmp_path / "home",
        headers={"X-Contextsvc-Session": "cc-tiny"},
    )
    assert code != 0
    shown = f"{result}{err}"
    assert "CLAUDE_CODE_MAX_OUTPUT_TOKENS" in shown and "30,000" in shown and "32,000" in shown
    assert messages_requests(fake_anthropic) == []
    session = Session.objects.get(external_id="cc-tiny")
    assert session.message_count == 0 and session.sections == []
