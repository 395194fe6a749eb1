"""GET /context of a session with nothing left to send is still a request the providers accept.

A session with a system prompt only, and one whose compaction put the summary
in the system prompt (``summary_role`` system) and kept no turn: each format
gets the engine's marked synthetic user line (engine.wellformed.with_user_turn),
and the stored transcript is unchanged by the build.
"""

from __future__ import annotations

import pytest

from contextsvc.engine.wellformed import EMPTY_AFTER_SUMMARY_TEXT, EMPTY_HISTORY_TEXT
from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from fakes.responses_rules import validate_responses
from sessions.models import Message, Session

pytestmark = pytest.mark.django_db

FORMATS = ("anthropic", "openai", "responses")


def check_formats(alice, sid: str, expected: str) -> None:
    for fmt in FORMATS:
        response = alice.get(f"sessions/{sid}/context?format={fmt}")
        assert response.status_code == 200, response.content
        body = response.json()
        if fmt == "anthropic":
            validate({k: body[k] for k in ("model", "max_tokens", "system", "messages")})
        elif fmt == "openai":
            validate_chat({"model": body["model"], "messages": body["messages"]})
        else:
            validate_responses({"model": body["model"], "input": body["input"]}, set())
        assert expected in str(body), fmt


def transcript(session) -> list[tuple]:
    return list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "content")
    )


def test_empty_history_still_builds_an_accepted_request_system_prompt_only(alice, session_factory):
    session = session_factory(0)
    sid = session.external_id
    alice.put(f"sessions/{sid}/system", [{"name": "base", "content": "You are an agent."}])
    check_formats(alice, sid, EMPTY_HISTORY_TEXT)
    assert transcript(session) == []


def test_empty_history_still_builds_an_accepted_request_after_a_system_summary(
    alice, session_factory
):
    session = session_factory(4, policy={"compaction": {"summary_role": "system"}})
    sid = session.external_id
    response = alice.post(
        f"sessions/{sid}/compact",
        {"strategy": "summarize", "retain_last_turns": 0, "wait": True},
    )
    assert response.status_code == 200, response.content
    # The offline summariser always retains the task; a provider's may return
    # no <retain>: then nothing is left to send as a message.
    Session.objects.filter(pk=session.pk).update(retain="")
    raw = alice.get(f"sessions/{sid}/context?format=raw").json()
    # The scenario: every turn left the window, the summary is in the system role.
    assert raw["messages"] == [] and raw["summary"] and raw["summary_role"] == "system"
    assert not raw["retain"]
    before = transcript(session)
    check_formats(alice, sid, EMPTY_AFTER_SUMMARY_TEXT)
    assert transcript(session) == before and len(before) == 24  # 4 turns of 6
