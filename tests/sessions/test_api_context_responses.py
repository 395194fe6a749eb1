"""GET /context?format=responses: the same assembler, in the OpenAI Responses API's item form."""

from __future__ import annotations

import pytest

from fakes.responses_rules import validate_responses

pytestmark = pytest.mark.django_db

TOOL = {
    "name": "bash",
    "description": "Run a command",
    "category": "builtin",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def test_responses_format(alice, make_session):
    sid = make_session(id="ctx_responses")["id"]
    alice.put(f"sessions/{sid}/system", [{"name": "base", "content": "You are a coding agent."}])
    alice.put(f"sessions/{sid}/tools", [TOOL])
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {"role": "user", "content": "Fix the bug"},
                {
                    "role": "assistant",
                    "content": "Looking.",
                    "tool_calls": [{"id": "t1", "name": "bash", "arguments": {"command": "ls"}}],
                },
                {"role": "tool", "tool_call_id": "t1", "content": "bug here"},
                {"role": "assistant", "content": "Fixed."},
            ]
        },
    )
    body = alice.get(f"sessions/{sid}/context", format="responses").json()
    assert body["instructions"] == "You are a coding agent."
    kinds = [item.get("type", "message") for item in body["input"]]
    assert kinds == ["message", "message", "function_call", "function_call_output", "message"]
    call = body["input"][2]
    assert call["call_id"] == "t1" and call["name"] == "bash"
    assert body["tools"][0] == {
        "type": "function",
        "name": "bash",
        "description": "Run a command",
        "parameters": TOOL["input_schema"],
    }
    validate_responses({"model": body["model"], "input": body["input"]}, issued=set())
    assert body["budget"]["guard"]["status"] == "ok"
