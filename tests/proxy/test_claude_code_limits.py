"""The real Claude Code CLI through the live proxy: a model or a window that says no, a sub-agent.

- A model whose profile takes no mid-conversation system messages (the fake
  upstream rejects them for it, as the API does for models before Claude Opus
  4.8): Claude Code still sends its system messages; the proxy stores them as
  such and sends them as marked user reminders, so the run completes and the
  fake rejects nothing.
- A window that cannot hold Claude Code's system prompt, tools and its
  default ``max_tokens`` (32,000): the proxy answers the provider-shaped 400
  naming the numbers and ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, Claude Code shows
  it as its error, and the session is left as it was.
- A sub-agent (Claude Code's ``Agent`` tool): its requests carry the same
  session id but another system prompt, and go to a side session linked to
  the main one; the main transcript holds the call and its result only.
"""

from __future__ import annotations

import pytest

from contextsvc.engine.build import SYSTEM_REMINDER_HEADER
from fakes.claude_code import (
    FINAL_ANSWER,
    SUBTASK,
    BashAgent,
    SubAgentTask,
    run_claude,
)
from proxy.models import ClientCompaction
from sessions.models import Message, ModelProfile, Session
from tests.proxy.claude_code_live import WINDOW, make_window_session, messages_requests, start_proxy
from tests.proxy.conftest import PROXY_DB

pytestmark = [pytest.mark.needs_postgres, pytest.mark.needs_agents, *PROXY_DB]

OLD_MODEL = "claude-fake-old"


@pytest.fixture
def managed_proxy(tmp_path, fake_anthropic):
    with start_proxy(tmp_path, fake_anthropic, managed=True) as port:
        yield f"http://127.0.0.1:{port}/proxy/anthropic"


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


def test_a_sub_agent_goes_to_a_linked_side_session(
    tmp_path, managed_proxy, fake_anthropic, alice, alice_key
):
    fake_anthropic.agent = SubAgentTask()
    make_window_session(alice, "cc-main")
    code, result, err = run_claude(
        managed_proxy,
        alice_key[1],
        tmp_path / "home",
        model="claude-opus-4-8",
        headers={"X-Contextsvc-Session": "cc-main"},
        env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"},
        extra_args=["--allowedTools", "Agent"],
    )
    assert code == 0, (err, result)
    assert result["result"] == FINAL_ANSWER
    assert [r.error for r in messages_requests(fake_anthropic) if r.status != 200] == []
    main = Session.objects.get(external_id="cc-main")
    side = Session.objects.get(parent=main)
    assert side.external_id.startswith("cc-main~")
    side_texts = " ".join(
        f"{content} {parts}"
        for content, parts in Message.objects.filter(session=side).values_list("content", "parts")
    )
    assert SUBTASK in side_texts and "sub-agent: it is today" in side_texts
    # The main transcript holds the Agent call and its result, never the sub-agent's turns.
    main_rows = Message.objects.filter(session=main).values_list("role", "content", "parts")
    assert not any(role == "user" and SUBTASK in f"{c} {p}" for role, c, p in main_rows)
    assert not any(
        "sub-agent: it is today" in f"{c} {p}" for r, c, p in main_rows if r == "assistant"
    )
    assert not ClientCompaction.objects.filter(session=main).exists()
    assert main.window_start_seq == 1
