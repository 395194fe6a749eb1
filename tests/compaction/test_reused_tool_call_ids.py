"""Compaction with a reused tool-call id: the open call of the id stays open."""

from __future__ import annotations

import pytest

from fakes.anthropic_rules import validate
from sessions.models import Session
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


def test_an_answered_call_leaving_the_window_keeps_a_later_open_call_of_its_id_open(
    alice, make_session
):
    sid = make_session(id="reuse-compact")["id"]
    alice.put(f"sessions/{sid}/tools", [{"name": "bash", "input_schema": {"type": "object"}}])
    for n, command in enumerate(("ls", "cat", "grep")):
        turn = [{"role": "user", "content": f"step {n}: " + "look at the logs " * 40}]
        turn += tool_turn("a", f"output {n} " + "line of log\n" * 60, command=command)
        assert alice.post(f"sessions/{sid}/messages", {"messages": turn}).status_code == 200
    last = [
        {"role": "user", "content": "one more"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "a", "name": "bash", "arguments": {"command": "pwd"}}],
        },
    ]
    assert alice.post(f"sessions/{sid}/messages", {"messages": last}).status_code == 200

    compacted = alice.post(
        f"sessions/{sid}/compact",
        {"wait": True, "strategy": "summarize", "retain_last_turns": 1},
    )
    assert compacted.status_code == 200, compacted.content
    assert compacted.json()["status"] == "succeeded"
    session = Session.objects.get(external_id=sid)
    assert session.window_start_seq > 9  # the answered calls of "a" left the window
    assert session.open_tool_calls == {"a": "bash"}

    result = {"role": "tool", "tool_call_id": "a", "content": "/srv/app"}
    assert alice.post(f"sessions/{sid}/messages", {"messages": [result]}).status_code == 200
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    del body["budget"]
    validate(body)
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    uses = [(b["id"], b["input"]["command"]) for b in blocks if b["type"] == "tool_use"]
    results = [(b["tool_use_id"], b["content"]) for b in blocks if b["type"] == "tool_result"]
    assert uses == [("a", "pwd")] and results == [("a", "/srv/app")]
