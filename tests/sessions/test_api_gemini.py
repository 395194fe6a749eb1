"""POST /messages?format=gemini, GET /context?format=gemini and the export in Gemini contents."""

from __future__ import annotations

import json

import pytest

from fakes.gemini_rules import validate
from sessions.models import Message, Session

pytestmark = pytest.mark.django_db

SHELL = "run_shell_command"
TOOLS = [
    {
        "name": SHELL,
        "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]
# As Gemini CLI holds a conversation: calls without ids, results paired by name.
CONTENTS = [
    {"role": "user", "parts": [{"text": "List the files, then count them."}]},
    {
        "role": "model",
        "parts": [
            {"text": "Listing."},
            {
                "functionCall": {"name": SHELL, "args": {"command": "ls"}},
                "thoughtSignature": "c2ln",
            },
        ],
    },
    {
        "role": "user",
        "parts": [{"functionResponse": {"name": SHELL, "response": {"output": "a.py\nb.py"}}}],
    },
    {
        "role": "model",
        "parts": [{"functionCall": {"name": SHELL, "args": {"command": "ls | wc -l"}, "id": "c2"}}],
    },
    {
        "role": "user",
        "parts": [{"functionResponse": {"name": SHELL, "id": "c2", "response": {"error": "boom"}}}],
    },
    {"role": "model", "parts": [{"text": "Two files; wc failed."}]},
]


def _session(alice, make_session, sid):
    make_session(id=sid)
    alice.put(f"sessions/{sid}/tools", TOOLS)
    alice.put(f"sessions/{sid}/system", [{"name": "base", "content": "You are a CLI agent."}])
    return sid


def _post(alice, sid, contents):
    return alice.post(f"sessions/{sid}/messages?format=gemini", {"messages": contents})


def test_gemini_contents_are_stored_as_transcript_messages(alice, make_session):
    sid = _session(alice, make_session, "gem_store")
    response = _post(alice, sid, CONTENTS)
    assert response.status_code == 200, response.content
    roles = ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["role"] for m in response.json()["messages"]] == roles
    assert Session.objects.get(external_id=sid).open_tool_calls == {}
    rows = list(Message.objects.filter(session__external_id=sid).order_by("seq"))
    assert rows[2].tool_call_id == rows[1].tool_calls[0]["id"]


def test_gemini_round_trip_through_the_context(alice, make_session):
    sid = _session(alice, make_session, "gem_round")
    assert _post(alice, sid, CONTENTS).status_code == 200
    body = alice.get(f"sessions/{sid}/context", format="gemini").json()
    assert body["contents"][: len(CONTENTS)] == CONTENTS
    # The status note comes after the history, as user text.
    assert all(c["role"] == "user" for c in body["contents"][len(CONTENTS) :])
    assert body["systemInstruction"]["parts"][0] == {"text": "You are a CLI agent."}
    declarations = body["tools"][0]["functionDeclarations"]
    assert declarations[0]["name"] == SHELL
    assert declarations[0]["parametersJsonSchema"] == TOOLS[0]["input_schema"]
    assert "budget" in body
    validate({k: v for k, v in body.items() if k != "budget"})


def test_a_turn_at_a_time_pairs_id_less_results_with_the_sessions_open_calls(alice, make_session):
    sid = _session(alice, make_session, "gem_turns")
    for content in CONTENTS[:3]:
        assert _post(alice, sid, [content]).status_code == 200
    assert Session.objects.get(external_id=sid).open_tool_calls == {}
    body = alice.get(f"sessions/{sid}/context", format="gemini").json()
    assert body["contents"][:3] == CONTENTS[:3]


def test_other_formats_built_as_gemini(alice, make_session):
    sid = _session(alice, make_session, "gem_cross")
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {"role": "user", "content": "Fix the bug"},
                {
                    "role": "assistant",
                    "content": "Looking.",
                    "tool_calls": [{"id": "t1", "name": SHELL, "arguments": {"command": "ls"}}],
                },
                {"role": "tool", "tool_call_id": "t1", "content": "bug here"},
            ]
        },
    )
    body = alice.get(f"sessions/{sid}/context", format="gemini").json()
    validate(body)
    call, answer = body["contents"][1]["parts"][1], body["contents"][2]["parts"][0]
    assert call == {"functionCall": {"name": SHELL, "args": {"command": "ls"}, "id": "t1"}}
    assert answer == {
        "functionResponse": {"name": SHELL, "id": "t1", "response": {"output": "bug here"}}
    }


@pytest.mark.parametrize(
    ("contents", "field", "rule"),
    [
        ([{"role": "system", "parts": [{"text": "x"}]}], "messages.0.role", "valid role"),
        (
            [CONTENTS[0], {"role": "model", "parts": [{"text": "ok"}]}, {"role": "tool"}],
            "messages.2.role",
            "valid role",
        ),
        ([{"role": "user", "parts": "text"}], "messages.0.parts", "parts"),
    ],
)
def test_bad_gemini_content_is_422_naming_the_field(alice, make_session, contents, field, rule):
    sid = _session(alice, make_session, "gem_bad")
    response = _post(alice, sid, contents)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["details"] == {"field": field, "format": "gemini"}
    assert rule in error["message"]
    assert not Message.objects.filter(session__external_id=sid).exists()


def test_export_in_gemini_contents(alice, make_session):
    sid = _session(alice, make_session, "gem_export")
    assert _post(alice, sid, CONTENTS).status_code == 200
    response = alice.get(f"sessions/{sid}/export", format="gemini")
    assert response.status_code == 200
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert lines == CONTENTS


def test_builtin_tools_are_listed_as_function_declarations(alice):
    body = alice.get("tools").json()
    anthropic = {t["name"]: t for t in body["anthropic"]}
    gemini = {t["name"]: t for t in body["gemini"]}
    assert gemini.keys() == anthropic.keys()
    for name, tool in gemini.items():
        assert tool["parametersJsonSchema"] == anthropic[name]["input_schema"]
    validate(
        {
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [{"functionDeclarations": list(gemini.values())}],
        }
    )
