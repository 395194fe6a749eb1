"""POST /sessions/{sid}/messages: ingest, counters, tool-call pairing, idempotency, bad input."""

from __future__ import annotations

import pytest

from sessions.models import Message, Session
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


def test_append_returns_seqs_token_counts_and_budget(alice, make_session):
    sid = make_session(id="m")["id"]
    response = alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {"role": "user", "content": "List the files"},
                *tool_turn("c1", "a.py\nb.py\n"),
            ]
        },
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert [m["seq"] for m in body["messages"]] == [1, 2, 3]
    assert all(m["token_count"] > 0 for m in body["messages"])
    assert body["budget"]["components"]["conversation"] == sum(
        m["token_count"] for m in body["messages"]
    )
    assert body["budget"]["guard"]["status"] == "ok"


def test_token_count_is_computed_once_at_ingest(alice, make_session, monkeypatch):
    """Cost per append is flat: a new batch tokenizes only itself, never history."""
    sid = make_session(id="once")["id"]
    alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "first " * 100}]}
    )
    from contextsvc.engine import token_estimate

    calls = []
    real = token_estimate.count_message

    def counting(msg, *a, **kw):
        calls.append(msg.text)
        return real(msg, *a, **kw)

    monkeypatch.setattr("sessions.services.prepare.count_message", counting)
    alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "assistant", "content": "second"}]}
    )
    alice.get(f"sessions/{sid}/budget")
    alice.get(f"sessions/{sid}/context")
    assert calls == ["second"]
    stored = Message.objects.get(session__external_id=sid, seq=1)
    assert stored.token_count >= 100  # "first " x100 counted at ingest and kept


def test_per_message_estimate_counts_tool_calls_reasoning_and_ids_spec003(alice, make_session):
    sid = make_session(id="est")["id"]
    plain = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "assistant", "content": "ok"}]}
    ).json()
    rich = alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "ok",
                    "reasoning": "think " * 50,
                    "tool_calls": [
                        {
                            "id": "call_abc",
                            "name": "read_file",
                            "arguments": {"path": "/src/very/long/path.py"},
                        }
                    ],
                }
            ]
        },
    ).json()
    assert rich["messages"][0]["token_count"] > plain["messages"][0]["token_count"] + 50


def test_media_parts_add_flat_per_item_estimate_spec003(alice, make_session):
    sid = make_session(id="media")["id"]
    text_only = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"}]}]},
    ).json()
    with_image = alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": "iVBORw0KGgo=",
                            },
                        },
                    ],
                }
            ]
        },
    ).json()
    assert (
        with_image["messages"][0]["token_count"] - text_only["messages"][0]["token_count"] == 1600
    )


def test_tool_result_must_answer_an_open_call(alice, make_session):
    sid = make_session(id="pair")["id"]
    response = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "tool", "tool_call_id": "ghost", "content": "x"}]},
    )
    assert response.status_code == 422
    assert response.json()["error"]["details"] == {"field": "messages.0.tool_call_id"}
    # A result answers once; a second result for the same call is rejected.
    assert (
        alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", "out")}).status_code
        == 200
    )
    again = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "tool", "tool_call_id": "c1", "content": "dup"}]},
    )
    assert again.status_code == 422


def test_call_and_result_may_arrive_in_separate_batches_and_name_is_filled(alice, make_session):
    sid = make_session(id="split")["id"]
    call, result = tool_turn("c9", "done", name="pytest")
    assert alice.post(f"sessions/{sid}/messages", {"messages": [call]}).status_code == 200
    assert alice.post(f"sessions/{sid}/messages", {"messages": [result]}).status_code == 200
    assert Message.objects.get(session__external_id=sid, seq=2).name == "pytest"


def test_rejected_batch_stores_nothing(alice, make_session):
    sid = make_session(id="atomic")["id"]
    response = alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {"role": "user", "content": "hello"},
                {"role": "tool", "tool_call_id": "nope", "content": "x"},
            ]
        },
    )
    assert response.status_code == 422
    session = Session.objects.get(external_id=sid)
    assert session.last_seq == 0 and session.conversation_tokens == 0
    assert not Message.objects.filter(session=session).exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": [{"role": "developer", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({"messages": "nope"}, "messages"),
        ({"messages": [{"role": "user", "content": "x", "extra": 1}]}, "messages.0.extra"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0"),
        ({"messages": [{"role": "user", "tool_calls": [{"id": "a", "name": "b"}]}]}, "messages.0"),
    ],
)
def test_wrong_types_are_422_naming_the_field(alice, make_session, body, field):
    sid = make_session(id="types")["id"]
    response = alice.post(f"sessions/{sid}/messages", body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert any(d["field"].startswith(field) for d in error["details"]), error


def test_empty_message_list_spec004(alice, make_session):
    sid = make_session(id="empty")["id"]
    response = alice.post(f"sessions/{sid}/messages", {"messages": []})
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "Conversation has no messages"


def test_malformed_json_is_422(alice, make_session):
    sid = make_session(id="json")["id"]
    response = alice.post(f"sessions/{sid}/messages", raw=b'{"messages": [')
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"
    assert response.json()["error"]["details"] == {"field": "body"}


def test_body_over_limit_is_413(alice, make_session, settings):
    sid = make_session(id="big")["id"]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    settings.CONTEXTSVC_MAX_JSON_BODY = 10_000
    response = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "x" * 20_000}]}
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert Session.objects.get(external_id=sid).last_seq == 0


def test_openai_style_string_arguments_are_parsed(alice, make_session):
    sid = make_session(id="oa")["id"]
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c1", "name": "f", "arguments": '{"x": 1}'},
                        {"id": "c2", "name": "g", "arguments": "not json"},
                    ],
                }
            ]
        },
    )
    calls = Message.objects.get(session__external_id=sid, seq=1).tool_calls
    assert calls[0]["arguments"] == {"x": 1}
    assert calls[1]["arguments"] == {"_raw": "not json"}


def test_idempotency_key_replays_first_response_and_stores_once(alice, make_session):
    sid = make_session(id="idem")["id"]
    body = {"messages": [{"role": "user", "content": "once"}]}
    first = alice.post(f"sessions/{sid}/messages", body, headers={"Idempotency-Key": "k-1"})
    second = alice.post(f"sessions/{sid}/messages", body, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert Message.objects.filter(session__external_id=sid).count() == 1
    other = alice.post(f"sessions/{sid}/messages", body, headers={"Idempotency-Key": "k-2"})
    assert other.json()["messages"][0]["seq"] == 2


def test_idempotency_key_with_a_different_body_is_conflict(alice, make_session):
    sid = make_session(id="idem2")["id"]
    alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "a"}]},
        headers={"Idempotency-Key": "k"},
    )
    response = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "b"}]},
        headers={"Idempotency-Key": "k"},
    )
    assert response.status_code == 409
    assert Message.objects.filter(session__external_id=sid).count() == 1


def test_batch_over_the_configured_maximum_is_422_and_stores_nothing(alice, make_session, settings):
    sid = make_session(id="many")["id"]
    settings.CONTEXTSVC_MAX_BATCH = 5
    response = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "x"}] * 6}
    )
    assert response.status_code == 422
    assert "At most 5 messages" in response.json()["error"]["message"]
    assert Session.objects.get(external_id=sid).last_seq == 0


def test_large_batch_is_stored_in_order_across_insert_chunks(alice, make_session):
    sid = make_session(id="large")["id"]
    batch = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(1000)
    ]
    body = alice.post(f"sessions/{sid}/messages", {"messages": batch}).json()
    assert [m["seq"] for m in body["messages"]] == list(range(1, 1001))
    stored = list(
        Message.objects.filter(session__external_id=sid)
        .order_by("seq")
        .values_list("content", flat=True)
    )
    assert stored == [f"m{i}" for i in range(1000)]
