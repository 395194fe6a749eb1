"""Reasoning in GET /context (anthropic): the tool loop's thinking goes back; older turns' optional."""

from __future__ import annotations

import hashlib

import pytest

from fakes.anthropic_rules import validate

pytestmark = pytest.mark.django_db


def thinking(text: str) -> dict:
    signature = hashlib.sha256(text.encode()).hexdigest()
    return {"type": "thinking", "thinking": text, "signature": signature}


def turn(k: int) -> list[dict]:
    return [
        {"role": "user", "content": f"task {k}"},
        {
            "role": "assistant",
            "content": [thinking(f"plan {k}"), {"type": "text", "text": f"Working on {k}."}],
            "tool_calls": [{"id": f"t{k}", "name": "read", "arguments": {"k": k}}],
        },
        {"role": "tool", "tool_call_id": f"t{k}", "content": f"result {k}"},
    ]


def context(alice, make_session, **policy) -> dict:
    sid = make_session(policy=policy)["id"]
    tools = [{"name": "read", "description": "Read", "input_schema": {"type": "object"}}]
    assert alice.put(f"sessions/{sid}/tools", tools).status_code == 200
    for k in (1, 2, 3):
        response = alice.post(f"sessions/{sid}/messages", {"messages": turn(k)})
        assert response.status_code == 200, response.content
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    body.pop("budget")
    return {**body, "thinking": {"type": "enabled", "budget_tokens": 1024}}


def thoughts(body: dict) -> list[str]:
    return [
        b["thinking"] for m in body["messages"] for b in m["content"] if b["type"] == "thinking"
    ]


def test_reasoning_api_tool_loop_thinking_sent_back_every_turn_by_default(alice, make_session):
    body = context(alice, make_session)
    validate(body)  # the fake's (= the API's) extended-thinking rules
    assert thoughts(body) == ["plan 1", "plan 2", "plan 3"]
    assert body["messages"][-2]["content"][0] == thinking("plan 3")


def test_reasoning_api_older_turns_dropped_with_keep_thinking_turns(alice, make_session):
    body = context(alice, make_session, reasoning={"keep_thinking_turns": 1})
    validate(body)
    assert thoughts(body) == ["plan 3"]
    two = context(alice, make_session, reasoning={"keep_thinking_turns": 2})
    assert thoughts(two) == ["plan 2", "plan 3"]


@pytest.mark.parametrize("value", [0, -1, "all", 10_001])
def test_reasoning_api_bad_keep_thinking_turns_is_422(alice, value):
    response = alice.post(
        "sessions",
        {"model": "claude-sonnet-4-5", "policy": {"reasoning": {"keep_thinking_turns": value}}},
    )
    assert response.status_code == 422
    assert "keep_thinking_turns" in str(response.json()["error"])
