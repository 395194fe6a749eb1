"""Compaction endpoints: /compact, /compactions/{id}, /snapshot(s), restore, /overflow, the tool."""

from __future__ import annotations

import pytest

from compaction.models import CompactionRun, Snapshot
from compaction.services.execute import compaction_execute
from sessions.models import Message, Session

from .conftest import turn

pytestmark = pytest.mark.django_db


def post_turns(client, sid: str, turns: range) -> dict:
    body = {}
    for t in turns:
        response = client.post(f"sessions/{sid}/messages", {"messages": turn(t)})
        assert response.status_code == 200, response.content
        body = response.json()
    return body


@pytest.fixture
def sid(alice, session_factory) -> str:
    return session_factory(8).external_id


# --- POST /compact ----------------------------------------------------------------------


def test_compact_without_wait_is_202_and_enqueued_on_commit(
    alice, sid, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post(f"sessions/{sid}/compact", {})
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "queued" and body["joined"] is False
    run = CompactionRun.objects.get(pk=body["run_id"])
    assert (run.trigger, run.forced) == ("manual", True)
    assert enqueued == [(body["run_id"], run.celery_task_id)]


def test_second_compact_joins(alice, sid):
    first = alice.post(f"sessions/{sid}/compact", {}).json()
    second = alice.post(f"sessions/{sid}/compact", {"strategy": "summarize"}).json()
    assert second["run_id"] == first["run_id"] and second["joined"] is True


def test_compact_with_wait_returns_compact_result_spec002_7(alice, sid):
    before = alice.get(f"sessions/{sid}/budget").json()
    response = alice.post(
        f"sessions/{sid}/compact",
        {
            "wait": True,
            "strategy": "summarize",
            "instructions": "Keep mod paths",
            "retain_last_turns": 1,
        },
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "succeeded"
    result = body["result"]
    assert set(result) == {
        "before_tokens",
        "after_tokens",
        "before_msg_count",
        "after_msg_count",
        "strategies_run",
    }
    assert (
        result["strategies_run"] == ["summarize"]
        and result["after_tokens"] < result["before_tokens"]
    )
    after = alice.get(f"sessions/{sid}/budget").json()
    assert after["used"] < before["used"]
    assert after["components"]["summary"] > 0


def test_compact_wait_joins_a_queued_run_and_runs_it(alice, sid):
    queued = alice.post(f"sessions/{sid}/compact", {}).json()
    body = alice.post(f"sessions/{sid}/compact", {"wait": True}).json()
    assert body["run_id"] == queued["run_id"] and body["status"] == "succeeded"


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"strategy": "magic"}, "strategy"),
        ({"retain_last_turns": -1}, "retain_last_turns"),
        ({"unknown": 1}, "unknown"),
        ({"wait": "soon"}, "wait"),
    ],
)
def test_compact_validation_errors(alice, sid, payload, field):
    response = alice.post(f"sessions/{sid}/compact", payload)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and field in error["message"]


def test_compact_empty_session_is_validation_error_cx_nt2(alice, make_session):
    sid = make_session()["id"]
    response = alice.post(f"sessions/{sid}/compact", {"wait": True})
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "VALIDATION_ERROR",
        "message": "Conversation has no messages",
        "details": {"field": "messages"},
    }
    assert not CompactionRun.objects.exists()


def test_compact_failure_is_503_and_session_unchanged_cx_nt3(alice, sid, monkeypatch):
    from contextsvc.engine.summarize import SummarizerError

    class Down:
        name = "down"

        def complete(self, request):
            raise SummarizerError("overloaded", transient=True, status=529)

    monkeypatch.setattr("compaction.summarizers.for_session", lambda **kw: Down())
    session = Session.objects.get(external_id=sid)
    before_ctx = alice.get(f"sessions/{sid}/context", format="raw").json()
    before_row = Session.objects.filter(pk=session.pk).values().get()
    response = alice.post(f"sessions/{sid}/compact", {"wait": True, "strategy": "summarize"})
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE" and "overloaded" in error["message"]
    run = CompactionRun.objects.get(pk=error["details"]["run_id"])
    assert run.status == "failed"
    assert Session.objects.filter(pk=session.pk).values().get() == before_row
    after_ctx = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert (
        after_ctx["messages"] == before_ctx["messages"]
        and after_ctx["summary"] == before_ctx["summary"]
    )


def test_compact_strangers_get_404(bob, anon, sid):
    assert bob.post(f"sessions/{sid}/compact", {}).status_code == 404
    assert anon.post(f"sessions/{sid}/compact", {}).status_code == 401


# --- GET /compactions/{id} ------------------------------------------------------------------------


def test_get_compaction_owner_scoped_with_retention(alice, bob, sid):
    run_id = alice.post(
        f"sessions/{sid}/compact", {"wait": True, "strategy": "drop_oldest_turns"}
    ).json()["run_id"]
    response = alice.get(f"compactions/{run_id}")
    assert response.status_code == 200
    body = response.json()
    assert (
        body["status"] == "succeeded" and body["trigger"] == "manual" and body["session_id"] == sid
    )
    assert 0 <= body["retention_score"] <= 1
    # What the drop took out is still found by history_search: recoverable, not lost.
    retention = body["retention"]
    assert retention["lost_count"] == len(retention["lost"])
    assert retention["recoverable"] > 0 and retention["kept"] + retention["recoverable"] > 0
    assert body["timings"]["total_ms"] >= body["timings"]["llm_ms"]
    assert body["snapshot_id"] == Snapshot.objects.get(run_id=run_id).pk
    # Another key's run is a 404, as is an id that is not one.
    assert bob.get(f"compactions/{run_id}").status_code == 404
    assert bob.get(f"compactions/{run_id}").json()["error"]["code"] == "NOT_FOUND"
    assert alice.get("compactions/not-a-uuid").status_code == 404


def test_list_compactions(alice, bob, sid):
    alice.post(f"sessions/{sid}/compact", {"wait": True})
    items = alice.get(f"sessions/{sid}/compactions").json()["items"]
    assert len(items) == 1 and items[0]["result"]["strategies_run"]
    assert bob.get(f"sessions/{sid}/compactions").status_code == 404


# --- snapshots and resume -----------------------------------------------------------------


def test_snapshot_of_a_never_compacted_session_is_the_full_history(alice, sid):
    body = alice.get(f"sessions/{sid}/snapshot").json()
    assert body["snapshot"] is None
    assert len(body["messages"]) == Message.objects.filter(session__external_id=sid).count()


def test_resume_from_snapshot_plus_later_messages_spec002_6(alice, sid):
    alice.post(f"sessions/{sid}/compact", {"wait": True, "strategy": "summarize"})
    post_turns(alice, sid, range(8, 9))
    body = alice.get(f"sessions/{sid}/snapshot").json()
    snap = body["snapshot"]
    assert snap["summary"] and snap["retain"] and snap["kind"] == "compaction"
    later = range(snap["through_seq"] + 1, snap["through_seq"] + 1 + len(turn(8)))
    assert [m["seq"] for m in body["later_messages"]] == list(later)
    # What resume loads is what the context sends.
    context = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert [m["seq"] for m in context["messages"]] == [m["seq"] for m in body["messages"]]
    assert context["summary"] == body["summary"]


def test_restore_snapshot_and_uncompacted_endpoints(alice, bob, sid):
    # Restores only: without auto-compaction, GET context (at block here) does
    # not compact before answering.
    alice.patch(f"sessions/{sid}", {"policy": {"compaction": {"auto": False}}})
    original = alice.get(f"sessions/{sid}/context", format="raw").json()["messages"]
    first = alice.post(
        f"sessions/{sid}/compact", {"wait": True, "strategy": "tool_clearing"}
    ).json()
    alice.post(f"sessions/{sid}/compact", {"wait": True, "strategy": "summarize"})
    snaps = alice.get(f"sessions/{sid}/snapshots").json()["items"]
    assert len(snaps) == 2
    first_snap = next(s for s in snaps if s["run_id"] == first["run_id"])
    response = alice.post(f"sessions/{sid}/snapshots/{first_snap['id']}/restore")
    assert response.status_code == 200, response.content
    assert response.json()["session"]["window_start_seq"] == first_snap["window_start_seq"]
    response = alice.post(f"sessions/{sid}/snapshots/uncompacted/restore")
    assert response.status_code == 200
    assert alice.get(f"sessions/{sid}/context", format="raw").json()["messages"] == original
    assert alice.post(f"sessions/{sid}/snapshots/9999/restore").status_code == 404
    assert alice.post(f"sessions/{sid}/snapshots/abc/restore").status_code == 404
    assert bob.post(f"sessions/{sid}/snapshots/uncompacted/restore").status_code == 404


# --- overflow (docs/concepts/compaction.md#overflow) ----------------------------------------------


def test_overflow_drops_oldest_turns_and_returns_the_new_context(alice, sid):
    before = alice.get(f"sessions/{sid}/context").json()
    response = alice.post(
        f"sessions/{sid}/overflow?format=openai", {"detail": "prompt is too long: 210000 tokens"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (
        body["compaction"]["trigger"] == "emergency" and body["compaction"]["status"] == "succeeded"
    )
    assert body["budget"]["used"] < before["budget"]["used"]
    assert body["messages"][0]["role"] == "system" or body["messages"][0]["role"] == "user"
    assert any(
        "provider reported the context too long" in str(m["content"]) for m in body["messages"]
    )


def test_overflow_unknown_field_is_422(alice, sid):
    assert alice.post(f"sessions/{sid}/overflow", {"bogus": 1}).status_code == 422


# --- the built-in tool and the 80 % note ---------------------------------------------------------


def test_compact_context_tool_is_listed_and_runs(alice, sid):
    tools = alice.get("tools").json()
    assert "compact_context" in [t["name"] for t in tools["anthropic"]]
    response = alice.post(f"sessions/{sid}/tools/compact_context/call", {})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["result"].startswith("Context compacted:") and body["status"] == "succeeded"
    assert body["compact_result"]["strategies_run"]
    assert CompactionRun.objects.get(pk=body["run_id"]).trigger == "tool"
    bad = alice.post(f"sessions/{sid}/tools/compact_context/call", {"instructions": 3})
    assert bad.status_code == 422


def test_context_note_above_80_percent_spec002_7(alice, session_factory):
    low = session_factory(2).external_id
    high = session_factory(6).external_id  # ~85 %
    note_start = "[Context: "
    assert note_start not in str(alice.get(f"sessions/{low}/context").json())
    body = alice.get(f"sessions/{high}/context", format="raw").json()
    notes = [n for n in body["notes"] if n.startswith(note_start)]
    pct = int(body["budget"]["used"] * 100 / body["budget"]["effective_window"])
    assert notes == [
        f"[Context: {pct}% used. You can call compact_context to free space before continuing"
        " with large operations.]"
    ]
    anthropic = alice.get(f"sessions/{high}/context").json()
    assert any(
        notes[0] == b.get("text") for m in anthropic["messages"] for b in m["content"]
    ) or any(notes[0] == b.get("text") for b in anthropic["system"])


def test_budget_reports_compaction_block(alice, sid):
    body = alice.get(f"sessions/{sid}/budget").json()
    assert body["compaction"]["circuit_breaker"] == {
        "open": False,
        "consecutive_failures": 0,
        "threshold": 3,
        "opened_at": None,
    }
    assert body["compaction"]["auto"] is True


def test_post_until_compact_then_next_context_is_small(
    alice, session_factory, enqueued, django_capture_on_commit_callbacks
):
    """The whole story without a worker: the auto run is queued; running it shrinks the context."""
    sid = session_factory(0).external_id
    status = "ok"
    t = 0
    with django_capture_on_commit_callbacks(execute=True):
        while status == "ok":
            status = post_turns(alice, sid, range(t, t + 1))["budget"]["guard"]["status"]
            t += 1
    ((run_id, _task),) = enqueued
    compaction_execute(run_id=run_id)
    body = alice.get(f"sessions/{sid}/context").json()
    assert body["budget"]["guard"]["status"] == "ok"
    assert alice.get(f"compactions/{run_id}").json()["status"] == "succeeded"


def test_a_call_after_a_compaction_accounts_its_messages_as_summarised(alice, sid):
    """GET /sessions/{sid}/calls/{id}: the seqs the compaction took are 'summarised'
    (the summary was sent), the live window 'kept'; a REST build has no client side."""
    done = alice.post(
        f"sessions/{sid}/compact", {"wait": True, "strategy": "summarize", "retain_last_turns": 1}
    )
    assert done.status_code == 200, done.content
    session = Session.objects.get(external_id=sid)
    start, last = session.window_start_seq, session.last_seq
    assert 1 < start <= last
    assert alice.get(f"sessions/{sid}/context?purpose=call").status_code == 200
    (call,) = alice.get(f"sessions/{sid}/calls").json()["items"][:1]
    account = alice.get(f"sessions/{sid}/calls/{call['id']}").json()["account"]
    assert account["client"] is None and account["changes"] is None
    rows = [(r["from"], r["to"], r["as"]) for r in account["messages"]]
    assert rows[0] == (1, start - 1, "summarised")
    assert rows[-1][1] == last and {r[2] for r in rows[1:]} <= {"kept", "view"}
    assert [a["what"] for a in account["added"]][:1] == ["summary"]
