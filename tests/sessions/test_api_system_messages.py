"""Mid-conversation system messages through the REST API: stored, counted, shown, built.

A ``system`` message posted at any position is a transcript message like any
other (GET /messages, the budget, the inspector); GET /context sends it in
place in every format, as a system message where the model takes one and as a
marked user reminder where it does not (the model profile's flag).
"""

from __future__ import annotations

import pytest

from contextsvc.engine.build import SYSTEM_REMINDER_HEADER
from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from sessions.models import Message, ModelProfile
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

RULE = "Answer in one sentence; use Bash for shell commands."
TOOL = {"name": "bash", "description": "Run a command", "input_schema": {"type": "object"}}


def post_conversation(alice, sid: str) -> dict:
    alice.put(f"sessions/{sid}/tools", [TOOL])
    messages = [
        {"role": "user", "content": "List the files"},
        {"role": "system", "content": RULE},
        *tool_turn("t1", "a.py\nb.py"),
        {"role": "assistant", "content": "Two files."},
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    ]
    response = alice.post(f"sessions/{sid}/messages", {"messages": messages})
    assert response.status_code == 200, response.content
    return response.json()


def test_a_system_message_is_stored_counted_and_listed_in_place(alice, make_session):
    sid = make_session(id="sys-store")["id"]
    before = alice.get(f"sessions/{sid}/budget").json()["used"]
    appended = post_conversation(alice, sid)["messages"]
    roles = ["user", "system", "assistant", "tool", "assistant", "system"]
    assert [m["role"] for m in appended] == roles
    assert appended[1]["token_count"] > 0
    row = Message.objects.get(session__external_id=sid, seq=2)
    assert (row.role, row.content) == ("system", RULE)
    assert alice.get(f"sessions/{sid}/budget").json()["used"] > before
    # The resume view (the transcript after the newest snapshot) lists it in place.
    resumed = alice.get(f"sessions/{sid}/snapshot").json()["messages"]
    assert [m["role"] for m in resumed] == roles
    assert resumed[1]["content"] == RULE


def test_context_for_a_model_that_takes_system_messages_keeps_them_in_place(alice, make_session):
    sid = make_session(id="sys-new", model="claude-opus-4-8")["id"]
    post_conversation(alice, sid)
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    roles = [m["role"] for m in body["messages"]]
    assert roles[:2] == ["user", "system"]
    assert body["messages"][1]["content"] == [{"type": "text", "text": RULE}]
    # "Be brief." follows an assistant turn: the API takes no system message
    # there, so it travels as a reminder in a user turn.
    texts = [b.get("text", "") for m in body["messages"] for b in m["content"]]
    assert f"{SYSTEM_REMINDER_HEADER}\nBe brief." in texts
    validate({k: v for k, v in body.items() if k != "budget"})


def test_context_for_an_older_model_turns_system_messages_into_reminders(alice, make_session):
    assert (
        ModelProfile.objects.get(
            provider="anthropic", model="claude-sonnet-4-5"
        ).mid_system_messages
        is False
    )
    sid = make_session(id="sys-old", model="claude-sonnet-4-5-20250929")["id"]
    post_conversation(alice, sid)
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    assert "system" not in [m["role"] for m in body["messages"]]
    first = [b["text"] for b in body["messages"][0]["content"]]
    assert first[:2] == ["List the files", f"{SYSTEM_REMINDER_HEADER}\n{RULE}"]
    validate({k: v for k, v in body.items() if k != "budget"})


def test_openai_and_raw_formats_keep_the_system_role(alice, make_session):
    sid = make_session(id="sys-oai", model="gpt-4o")["id"]
    post_conversation(alice, sid)
    body = alice.get(f"sessions/{sid}/context", format="openai").json()
    # A system message keeps the form it was posted in (text, or text parts).
    history = [
        m
        for m in body["messages"]
        if m["role"] != "system"
        or m["content"] in (RULE, "Be brief.", [{"type": "text", "text": "Be brief."}])
    ]
    assert [m["role"] for m in history] == [
        "user",
        "system",
        "assistant",
        "tool",
        "assistant",
        "system",
    ]
    validate_chat({k: v for k, v in body.items() if k != "budget"})
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert [m["role"] for m in raw["messages"]][:2] == ["user", "system"]


def test_the_operator_profile_flag_decides(alice, make_session):
    ModelProfile.objects.create(
        provider="anthropic", model="claude-fake-old", mid_system_messages=False
    )
    sid = make_session(id="sys-flag", model="claude-fake-old-1")["id"]
    post_conversation(alice, sid)
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    assert "system" not in [m["role"] for m in body["messages"]]
