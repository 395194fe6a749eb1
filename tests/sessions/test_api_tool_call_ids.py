"""Tool-call ids: reused once answered (as OpenAI accepts), never repeated while open.

A tau-bench GPT-4o run reuses an id after its first call was answered; the
append stores it as posted, a result answers the latest open call of its id,
and every built request carries unique ids (Anthropic rejects a repeated
``tool_use`` id). A repeat of a call still open stays a 422 naming the field.
"""

from __future__ import annotations

import pytest

from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from fakes.responses_rules import validate_responses
from sessions.models import Message, Session
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


def calls(*ids: str) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": i, "name": "bash", "arguments": {}} for i in ids],
    }


def user(text: str = "go") -> dict:
    return {"role": "user", "content": text}


def post(client, sid: str, *messages: dict):
    return client.post(f"sessions/{sid}/messages", {"messages": list(messages)})


def anthropic_pairs(body: dict) -> list[tuple[str, str, str]]:
    """(tool_use id, its command, the text of the tool_result answering it), in order."""
    uses: dict[str, str] = {}
    pairs = []
    for message in body["messages"]:
        if isinstance(message["content"], str):
            continue
        for block in message["content"]:
            if block["type"] == "tool_use":
                uses[block["id"]] = block["input"]["command"]
            elif block["type"] == "tool_result":
                use_id = block["tool_use_id"]
                pairs.append((use_id, uses[use_id], block["content"]))
    return pairs


def test_an_id_reused_after_its_call_was_answered_is_stored_as_posted(alice, make_session):
    sid = make_session(id="reuse-rest")["id"]
    assert (
        post(alice, sid, user(), *tool_turn("a", "first output", command="ls")).status_code == 200
    )
    assert post(alice, sid, *tool_turn("b", "other output", command="pwd")).status_code == 200
    reused = post(alice, sid, *tool_turn("a", "second output", name="read", command="cat"))
    assert reused.status_code == 200, reused.content
    rows = list(Message.objects.filter(session__external_id=sid).order_by("seq"))
    assert [c["id"] for r in rows for c in r.tool_calls or ()] == ["a", "b", "a"]
    assert [(r.tool_call_id, r.name) for r in rows if r.role == "tool"] == [
        ("a", "bash"),
        ("b", "bash"),
        ("a", "read"),  # the name of the latest call of "a": the one it answers
    ]
    assert Session.objects.get(external_id=sid).open_tool_calls == {}
    # The raw format is the transcript as stored.
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert [c["id"] for m in raw["messages"] for c in m.get("tool_calls", ())] == ["a", "b", "a"]


def test_the_built_requests_give_a_reused_id_a_unique_name_and_its_own_result(alice, make_session):
    sid = make_session(id="reuse-build")["id"]
    alice.put(f"sessions/{sid}/tools", [{"name": "bash", "input_schema": {"type": "object"}}])
    post(alice, sid, user(), *tool_turn("a", "first output", command="ls"))
    post(alice, sid, *tool_turn("a", "second output", command="cat"))
    post(alice, sid, *tool_turn("a", "third output", command="pwd"), user("and now?"))

    anthropic = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    del anthropic["budget"]
    validate(anthropic)  # the fake Messages API refuses a repeated tool_use id
    assert anthropic_pairs(anthropic) == [
        ("a", "ls", "first output"),
        ("a_2", "cat", "second output"),
        ("a_3", "pwd", "third output"),
    ]
    openai = alice.get(f"sessions/{sid}/context", format="openai").json()
    del openai["budget"]
    validate_chat(openai)
    ids = [c["id"] for m in openai["messages"] for c in m.get("tool_calls") or ()]
    results = [(m["tool_call_id"], m["content"]) for m in openai["messages"] if m["role"] == "tool"]
    assert ids == ["a", "a_2", "a_3"]
    assert results == [("a", "first output"), ("a_2", "second output"), ("a_3", "third output")]
    responses = alice.get(f"sessions/{sid}/context", format="responses").json()
    del responses["budget"]
    validate_responses(responses, set())
    call_ids = [i["call_id"] for i in responses["input"] if i.get("type") == "function_call"]
    assert call_ids == ["a", "a_2", "a_3"]


def test_one_batch_may_call_answer_and_call_an_id_again(alice, make_session):
    sid = make_session(id="reuse-batch")["id"]
    alice.put(f"sessions/{sid}/tools", [{"name": "bash", "input_schema": {"type": "object"}}])
    response = post(
        alice,
        sid,
        user(),
        *tool_turn("x", "one", command="ls"),
        *tool_turn("x", "two", command="cat"),
    )
    assert response.status_code == 200, response.content
    assert [m["seq"] for m in response.json()["messages"]] == [1, 2, 3, 4, 5]
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    assert anthropic_pairs(body) == [("x", "ls", "one"), ("x_2", "cat", "two")]


def test_a_call_repeating_an_open_id_of_the_session_is_422_naming_id_and_field(alice, make_session):
    sid = make_session(id="dup-open")["id"]
    assert post(alice, sid, calls("a")).status_code == 200
    again = post(alice, sid, user("hm"), calls("b", "a"))
    assert again.status_code == 422
    error = again.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert error["details"] == {"field": "messages.1.tool_calls.1.id"}
    assert "'a'" in error["message"] and "still open" in error["message"]
    session = Session.objects.get(external_id=sid)
    assert session.last_seq == 1 and session.open_tool_calls == {"a": "bash"}
    # Answered, the id is free again.
    assert post(alice, sid, {"role": "tool", "tool_call_id": "a", "content": "ok"}).status_code
    assert post(alice, sid, user("hm"), calls("b", "a")).status_code == 200


def test_a_repeat_of_an_id_open_earlier_in_the_batch_is_422_and_stores_nothing(alice, make_session):
    sid = make_session(id="dup-batch")["id"]
    same_message = post(alice, sid, calls("a", "a"))
    assert same_message.status_code == 422
    assert same_message.json()["error"]["details"] == {"field": "messages.0.tool_calls.1.id"}
    later = post(alice, sid, user(), *tool_turn("b", "out"), calls("c"), user("?"), calls("c"))
    assert later.status_code == 422
    assert later.json()["error"]["details"] == {"field": "messages.5.tool_calls.0.id"}
    assert "'c'" in later.json()["error"]["message"]
    assert Session.objects.get(external_id=sid).last_seq == 0
    assert not Message.objects.filter(session__external_id=sid).exists()


def test_a_batch_with_thousands_of_tool_calls_is_checked_against_the_open_ones(alice, make_session):
    sid = make_session(id="dup-many")["id"]
    assert post(alice, sid, calls("x1999")).status_code == 200
    many = [calls(*(f"x{n}" for n in range(k, k + 200))) for k in range(0, 2000, 200)]
    response = alice.post(f"sessions/{sid}/messages", {"messages": many})
    assert response.status_code == 422
    assert response.json()["error"]["details"] == {"field": "messages.9.tool_calls.199.id"}
    many[-1]["tool_calls"][-1]["id"] = "fresh"
    assert alice.post(f"sessions/{sid}/messages", {"messages": many}).status_code == 200


def test_retracting_a_result_whose_id_is_called_again_later_keeps_its_pair(alice, make_session):
    """A retracted range that reuses an id: its first result answers a call before it."""
    sid = make_session(id="reuse-retract")["id"]
    post(alice, sid, user(), calls("a"))
    post(
        alice,
        sid,
        {"role": "tool", "tool_call_id": "a", "content": "one"},
        *tool_turn("a", "two"),
    )
    refused = alice.post(f"sessions/{sid}/messages/retract", {"from_seq": 3})
    assert refused.status_code == 422
    assert refused.json()["error"]["details"] == {"field": "from_seq", "from_seq": 2}
    # The later exchange alone goes, and its id is free again.
    assert alice.post(f"sessions/{sid}/messages/retract", {"from_seq": 4}).status_code == 200
    assert Session.objects.get(external_id=sid).open_tool_calls == {}
    assert post(alice, sid, *tool_turn("a", "three")).status_code == 200
