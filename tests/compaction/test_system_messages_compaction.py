"""Compaction never loses the newest mid-conversation system instructions (REST, real DB)."""

from __future__ import annotations

import pytest

from contextsvc.engine.system_carry import CARRY_OPEN, split_carried
from sessions.models import Message
from tests.conftest import tool_turn

from .conftest import LOG

pytestmark = pytest.mark.django_db

RULE = "You are Claude Code. Use the Bash tool for shell commands."


def test_compaction_keeps_the_system_message_verbatim_above_the_summary(alice, make_session):
    sid = make_session(id="sys-compact", model="claude-opus-4-8")["id"]
    alice.put(f"sessions/{sid}/tools", [{"name": "bash", "input_schema": {"type": "object"}}])
    messages = [{"role": "user", "content": "Find the bug"}, {"role": "system", "content": RULE}]
    for k in range(6):
        messages += tool_turn(f"c{k}", f"step {k}\n" + LOG)
    messages += [
        {"role": "assistant", "content": "Found it."},
        {"role": "user", "content": "Fix it"},
    ]
    assert alice.post(f"sessions/{sid}/messages", {"messages": messages}).status_code == 200
    response = alice.post(f"sessions/{sid}/compact", {"wait": True, "strategy": "summarize"})
    assert response.status_code == 200, response.content
    assert response.json()["result"]["strategies_run"] == ["summarize"]
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert "system" not in [m["role"] for m in raw["messages"]]
    assert split_carried(raw["retain"])[0] == [RULE]
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    first = body["messages"][0]["content"][0]["text"]
    assert CARRY_OPEN in first and RULE in first
    # The transcript itself still holds it, at its place.
    row = Message.objects.get(session__external_id=sid, seq=2)
    assert (row.role, row.content) == ("system", RULE)
