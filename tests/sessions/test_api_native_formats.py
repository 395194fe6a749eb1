"""POST /sessions/{sid}/messages?format=anthropic|openai|responses and the way back."""

from __future__ import annotations

import pytest

from sessions.models import Message, Session

pytestmark = pytest.mark.django_db

TOOLS = [
    {
        "name": "bash",
        "description": "Run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]

ANTHROPIC = [
    {"role": "user", "content": "List the files"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "I should run ls.", "signature": "sig-abc"},
            {"type": "text", "text": "Listing."},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py\nb.py"},
            {"type": "text", "text": "and be quick"},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"command": "wc"}}
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": [{"type": "text", "text": "boom"}],
                "is_error": True,
            }
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "Two files; wc failed."}]},
]

OPENAI = [
    {"role": "user", "content": "List the files"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
    {"role": "assistant", "content": "Two files.", "reasoning_content": "counted"},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}], "name": "ann"},
]

RESPONSES = [
    {"role": "user", "content": "List the files"},
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "run ls"}],
        "encrypted_content": "gAAAA-opaque",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "bash",
        "arguments": '{"command": "ls"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "a.py\nb.py"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Two files.", "annotations": []}],
    },
]


def _session(alice, make_session, sid):
    make_session(id=sid)
    alice.put(f"sessions/{sid}/tools", TOOLS)
    return sid


def _post(alice, sid, fmt, messages, **kw):
    return alice.post(f"sessions/{sid}/messages?format={fmt}", {"messages": messages}, **kw)


@pytest.mark.parametrize(
    "fmt, messages, stored",
    [
        (
            "anthropic",
            ANTHROPIC,
            ["user", "assistant", "tool", "user", "assistant", "tool", "assistant"],
        ),
        ("openai", OPENAI, ["user", "assistant", "tool", "assistant", "user"]),
        ("responses", RESPONSES, ["user", "assistant", "tool", "assistant"]),
    ],
)
def test_native_batch_is_stored_as_transcript_messages(alice, make_session, fmt, messages, stored):
    sid = _session(alice, make_session, f"n-{fmt}")
    response = _post(alice, sid, fmt, messages)
    assert response.status_code == 200, response.content
    assert [m["role"] for m in response.json()["messages"]] == stored
    rows = Message.objects.filter(session__external_id=sid).order_by("seq")
    assert [r.role for r in rows] == stored
    assert Session.objects.get(external_id=sid).open_tool_calls == {}


def test_anthropic_round_trip_through_the_context(alice, make_session):
    sid = _session(alice, make_session, "rt-a")
    assert _post(alice, sid, "anthropic", ANTHROPIC).status_code == 200
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    assert _without_cache_control(body["messages"]) == ANTHROPIC


def test_openai_round_trip_through_the_context(alice, make_session):
    sid = _session(alice, make_session, "rt-o")
    assert _post(alice, sid, "openai", OPENAI).status_code == 200
    body = alice.get(f"sessions/{sid}/context", format="openai").json()
    # reasoning_content is kept (the transcript's reasoning) but never sent back:
    # OpenAI and DeepSeek refuse it in a request.
    expected = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in OPENAI]
    assert [m for m in body["messages"] if m["role"] != "system"] == expected
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert raw["messages"][3]["reasoning"] == "counted"


def test_responses_round_trip_through_the_context(alice, make_session):
    sid = _session(alice, make_session, "rt-r")
    alice.put(f"sessions/{sid}/system", [{"name": "base", "content": "Be brief."}])
    assert _post(alice, sid, "responses", RESPONSES).status_code == 200
    body = alice.get(f"sessions/{sid}/context", format="responses").json()
    assert body["input"] == RESPONSES
    assert body["instructions"] == "Be brief."
    assert [t["name"] for t in body["tools"]] == ["bash"]
    assert body["tools"][0]["type"] == "function"


def _without_cache_control(messages):
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
        out.append({**message, "content": content})
    return out


@pytest.mark.parametrize(
    "fmt, messages, field, rule",
    [
        (
            "anthropic",
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "hi"},
                        {"type": "tool_result", "tool_use_id": "x", "content": "y"},
                    ],
                }
            ],
            "messages.0.content.1",
            "must come first",
        ),
        ("anthropic", [{"role": "robot", "content": "hi"}], "messages.0.role", "'user'"),
        ("anthropic", [{"role": "user", "content": 5}], "messages.0.content", "string or list"),
        (
            "anthropic",
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "t", "name": "bash", "input": {}}],
                }
            ],
            "messages.0.content.0",
            "only allowed in assistant",
        ),
        ("openai", [{"role": "tool", "content": "x"}], "messages.0.tool_call_id", "tool_call_id"),
        ("openai", [{"role": "wizard", "content": "x"}], "messages.0.role", "Supported values"),
        (
            "openai",
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {}}],
                }
            ],
            "messages.0.tool_calls.0",
            "function.name",
        ),
        (
            "responses",
            [{"type": "function_call_output", "output": "x"}],
            "messages.0.call_id",
            "call_id",
        ),
        ("responses", [{"type": "frobnicate"}], "messages.0.type", "Not a Responses input item"),
        ("responses", [{"role": "tool", "content": "x"}], "messages.0.role", "Supported values"),
        ("responses", ["just text"], "messages.0", "expected an object"),
    ],
)
def test_bad_native_message_is_422_naming_field_and_rule(
    alice, make_session, fmt, messages, field, rule
):
    sid = make_session(id="bad")["id"]
    ok = {
        "openai": {"role": "user", "content": "fine"},
        "anthropic": {"role": "user", "content": "fine"},
        "responses": {"role": "user", "content": "fine"},
    }[fmt]
    # A valid message first: nothing of the batch may be stored.
    shifted = [ok, *messages]
    response = _post(alice, sid, fmt, shifted)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    expected = field.replace("messages.0", "messages.1", 1)
    assert error["details"]["field"] == expected
    assert error["details"]["format"] == fmt
    assert rule in error["message"] and fmt in error["message"]
    assert not Message.objects.filter(session__external_id=sid).exists()


def test_unknown_result_in_a_native_batch_names_the_native_message(alice, make_session):
    sid = make_session(id="orphan")["id"]
    response = _post(
        alice,
        sid,
        "anthropic",
        [
            {"role": "user", "content": "go"},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}],
            },
        ],
    )
    assert response.status_code == 422
    assert not Message.objects.filter(session__external_id=sid).exists()


def test_unknown_format_is_422(alice, make_session):
    sid = make_session(id="fmt")["id"]
    response = alice.post(f"sessions/{sid}/messages?format=cohere", {"messages": []})
    assert response.status_code == 422
    assert "format" in str(response.json()["error"]["details"])


def test_native_batch_with_extra_body_keys_is_422(alice, make_session):
    sid = make_session(id="extra")["id"]
    response = alice.post(
        f"sessions/{sid}/messages?format=openai",
        {"messages": [{"role": "user", "content": "x"}], "model": "gpt"},
    )
    assert response.status_code == 422


def test_native_append_is_idempotent_with_a_key(alice, make_session):
    sid = make_session(id="idem")["id"]
    headers = {"Idempotency-Key": "n1"}
    one = _post(alice, sid, "openai", OPENAI[:1], headers=headers).json()
    two = _post(alice, sid, "openai", OPENAI[:1], headers=headers).json()
    assert one == two
    assert Message.objects.filter(session__external_id=sid).count() == 1
