"""POST /sessions/{sid}/messages/retract: undo or retry a turn; nothing posted is lost."""

from __future__ import annotations

import pytest

from sessions.models import Message, Session
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


def _post(client, sid, messages):
    response = client.post(f"sessions/{sid}/messages", {"messages": messages})
    assert response.status_code == 200, response.content
    return response.json()


def _retract(client, sid, body, **kw):
    return client.post(f"sessions/{sid}/messages/retract", body, **kw)


@pytest.fixture
def turned(alice, make_session):
    """A session with two turns: a user question, a tool exchange, an answer; then another."""
    sid = make_session(id="rt")["id"]
    _post(
        alice,
        sid,
        [
            {"role": "user", "content": "List the files"},
            *tool_turn("c1", "a.py\nb.py\n"),
            {"role": "assistant", "content": "Two files."},
            {"role": "user", "content": "Now count the lines"},
            *tool_turn("c2", "42\n"),
            {"role": "assistant", "content": "42 lines."},
        ],
    )
    return sid


def test_retract_last_takes_messages_out_of_the_window_and_the_counters(alice, turned):
    before = alice.get(f"sessions/{turned}/budget").json()
    response = _retract(alice, turned, {"last": 4})
    assert response.status_code == 200, response.content
    body = response.json()
    assert [m["seq"] for m in body["retracted"]] == [5, 6, 7, 8]
    assert body["live_message_count"] == 4
    removed = sum(m["token_count"] for m in body["retracted"])
    after = alice.get(f"sessions/{turned}/budget").json()
    assert after["components"]["conversation"] == before["components"]["conversation"] - removed
    assert body["budget"]["used"] == after["used"]
    session = Session.objects.get(external_id=turned)
    assert session.message_count == 8  # the transcript keeps them
    assert session.live_message_count == 4
    assert session.open_tool_calls == {}


def test_retracted_messages_are_kept_marked_and_never_sent(alice, turned):
    _retract(alice, turned, {"from_seq": 5})
    rows = Message.objects.filter(session__external_id=turned).order_by("seq")
    assert [r.seq for r in rows] == list(range(1, 9))
    assert [r.retracted_at is not None for r in rows] == [False] * 4 + [True] * 4
    for fmt in ("anthropic", "openai", "raw", "responses"):
        text = alice.get(f"sessions/{turned}/context", format=fmt).content.decode()
        assert "count the lines" not in text and "42 lines" not in text, fmt
        assert "Two files." in text, fmt
    resume = alice.get(f"sessions/{turned}/snapshot").json()
    assert [m["seq"] for m in resume["messages"]] == [1, 2, 3, 4]


def test_retry_posts_the_same_turn_again_with_the_same_call_ids(alice, turned):
    """A retried turn may reuse its tool-call ids: a retracted result answers nothing."""
    _retract(alice, turned, {"from_seq": 5})
    body = _post(
        alice,
        turned,
        [
            {"role": "user", "content": "Now count the lines again"},
            *tool_turn("c2", "43\n"),
            {"role": "assistant", "content": "43 lines."},
        ],
    )
    assert [m["seq"] for m in body["messages"]] == [9, 10, 11, 12]
    context = alice.get(f"sessions/{turned}/context", format="raw").json()
    ids = [m.get("tool_call_id") for m in context["messages"] if m["role"] == "tool"]
    assert ids == ["c1", "c2"]
    assert [m["seq"] for m in context["messages"]] == [1, 2, 3, 4, 9, 10, 11, 12]
    assert "43 lines." in str(context["messages"]) and "42 lines." not in str(context["messages"])


def test_a_cut_inside_a_tool_exchange_is_a_422_naming_the_field(alice, turned):
    # seq 7 is the result of c2 (called at seq 6): retracting from it would leave c2 unanswered.
    response = _retract(alice, turned, {"from_seq": 7})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert error["details"] == {"field": "from_seq", "from_seq": 6}
    assert "c2" in error["message"]
    response = _retract(alice, turned, {"last": 2})
    assert response.status_code == 422
    assert response.json()["error"]["details"]["field"] == "last"
    # Nothing changed.
    assert not Message.objects.filter(retracted_at__isnull=False).exists()
    assert Session.objects.get(external_id=turned).live_message_count == 8


def test_retracting_an_open_call_closes_it(alice, make_session):
    sid = make_session(id="open")["id"]
    _post(alice, sid, [{"role": "user", "content": "go"}, tool_turn("c9", "x")[0]])
    assert Session.objects.get(external_id=sid).open_tool_calls == {"c9": "bash"}
    assert _retract(alice, sid, {"last": 1}).status_code == 200
    assert Session.objects.get(external_id=sid).open_tool_calls == {}
    # The result of the retracted call now matches nothing.
    response = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "tool", "tool_call_id": "c9", "content": "x"}]},
    )
    assert response.status_code == 422


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "last"),
        ({"last": 1, "from_seq": 2}, "from_seq"),
        ({"last": 0}, "last"),
        ({"last": 99}, "last"),
        ({"from_seq": 0}, "from_seq"),
        ({"from_seq": 99}, "from_seq"),
        ({"last": 1, "extra": 1}, "extra"),
    ],
)
def test_bad_retract_bodies_are_422_naming_the_field(alice, turned, body, field):
    response = _retract(alice, turned, body)
    assert response.status_code == 422, response.content
    assert field in str(response.json()["error"]["details"])


def test_from_seq_before_the_live_window_is_422(alice, turned):
    Session.objects.filter(external_id=turned).update(window_start_seq=5)
    response = _retract(alice, turned, {"from_seq": 2})
    assert response.status_code == 422
    assert response.json()["error"]["details"]["field"] == "from_seq"


def test_retract_is_idempotent_safe(alice, turned):
    first = _retract(alice, turned, {"from_seq": 5}).json()
    again = _retract(alice, turned, {"from_seq": 5})
    assert again.status_code == 200
    assert again.json()["retracted"] == [] and again.json()["live_message_count"] == 4
    # ``last`` with an Idempotency-Key: the retry replays, it does not retract more.
    headers = {"Idempotency-Key": "undo-1"}
    one = _retract(alice, turned, {"last": 1}, headers=headers).json()
    two = _retract(alice, turned, {"last": 1}, headers=headers).json()
    assert one == two and [m["seq"] for m in one["retracted"]] == [4]
    assert Session.objects.get(external_id=turned).live_message_count == 3
    other = _retract(alice, turned, {"last": 2}, headers=headers)
    assert other.status_code == 409
    assert first["retracted"]


def test_another_keys_session_is_404(bob, turned):
    response = _retract(bob, turned, {"last": 1})
    assert response.status_code == 404
    assert not Message.objects.filter(retracted_at__isnull=False).exists()


def test_compaction_after_a_retract_sees_only_live_messages(alice, turned):
    _retract(alice, turned, {"from_seq": 5})
    run = alice.post(
        f"sessions/{turned}/compact",
        {"wait": True, "strategy": "drop_oldest_turns", "retain_last_turns": 1},
    )
    assert run.status_code == 200, run.content
    session = Session.objects.get(external_id=turned)
    live = Message.objects.filter(
        session=session, seq__gte=session.window_start_seq, retracted_at__isnull=True
    )
    assert session.live_message_count == live.count()
    assert session.conversation_tokens == sum(m.token_count for m in live)
    resume = alice.get(f"sessions/{turned}/snapshot").json()
    assert all(m["seq"] < 5 for m in resume["messages"])


def test_retracting_after_a_compaction_leaves_the_snapshot_resume_without_them(alice, make_session):
    sid = make_session(id="snap", context_window=12_000, max_output_tokens=1_000)["id"]
    for t in range(4):
        _post(
            alice,
            sid,
            [
                {"role": "user", "content": f"turn {t}: " + "explain the module " * 120},
                *tool_turn(f"s{t}", "line of output\n" * 150),
                {"role": "assistant", "content": "done " * 100},
            ],
        )
    run = alice.post(
        f"sessions/{sid}/compact",
        {"wait": True, "strategy": "drop_oldest_turns", "retain_last_turns": 1},
    )
    assert run.status_code == 200 and run.json()["changed"] is True, run.content
    resume = alice.get(f"sessions/{sid}/snapshot").json()
    kept = [m["seq"] for m in resume["messages"]]
    assert resume["snapshot"] is not None and kept and kept[-1] == 16
    # The last turn, kept by the snapshot, is retracted: resume and context drop it.
    response = _retract(alice, sid, {"from_seq": kept[0]})
    assert response.status_code == 200, response.content
    assert alice.get(f"sessions/{sid}/snapshot").json()["messages"] == []
    session = Session.objects.get(external_id=sid)
    assert session.live_message_count == 0 and session.conversation_tokens == 0
    assert alice.get(f"sessions/{sid}/context", format="raw").json()["messages"] == []
