"""DELETE /sessions/{sid}: the session and everything hanging off it go; others stay."""

from __future__ import annotations

import pytest

from compaction.models import CompactionRun, Snapshot
from compaction.services import execute
from compaction.services.execute import compaction_execute
from compaction.services.requests import compaction_request
from proxy.models import ClientView, StoredResponse
from sessions.models import (
    IdempotencyRecord,
    Message,
    Session,
    ToolOutput,
    ToolOutputChunk,
    UsageReport,
)
from sessions.services.delete import session_delete
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


def _fill(client, sid):
    big = "\n".join(f"line {n}" for n in range(20_000))
    # Two turns: the compaction drops the first (a lone turn is never dropped).
    messages = [
        {"role": "user", "content": "go"},
        *tool_turn("c1", big),
        {"role": "user", "content": "again"},
        *tool_turn("c2", "ok"),
    ]
    response = client.post(
        f"sessions/{sid}/messages", {"messages": messages}, headers={"Idempotency-Key": "k1"}
    )
    assert response.status_code == 200, response.content
    client.post(f"sessions/{sid}/usage", {"input_tokens": 10, "output_tokens": 2})
    run = client.post(
        f"sessions/{sid}/compact",
        {"wait": True, "strategy": "drop_oldest_turns", "retain_last_turns": 1},
    )
    assert run.status_code == 200, run.content


def _counts(session_pk):
    return {
        "messages": Message.objects.filter(session_id=session_pk).count(),
        "outputs": ToolOutput.objects.filter(session_id=session_pk).count(),
        "chunks": ToolOutputChunk.objects.filter(output__session_id=session_pk).count(),
        "usage": UsageReport.objects.filter(session_id=session_pk).count(),
        "idempotency": IdempotencyRecord.objects.filter(session_id=session_pk).count(),
        "runs": CompactionRun.objects.filter(session_id=session_pk).count(),
        "snapshots": Snapshot.objects.filter(session_id=session_pk).count(),
        "views": ClientView.objects.filter(session_id=session_pk).count(),
        "responses": StoredResponse.objects.filter(session_id=session_pk).count(),
    }


def test_delete_removes_the_session_and_all_its_rows(alice, make_session):
    sid = make_session(id="gone")["id"]
    kept = make_session(id="kept")["id"]
    _fill(alice, sid)
    _fill(alice, kept)
    pk = Session.objects.get(external_id=sid).pk
    ClientView.objects.create(session_id=pk)
    StoredResponse.objects.create(session_id=pk, response_id="resp_1", response={"id": "resp_1"})
    before = _counts(pk)
    assert all(before.values()), before
    response = alice.request("DELETE", f"sessions/{sid}")
    assert response.status_code == 200, response.content
    assert response.json() == {"id": sid, "deleted": True}
    assert set(_counts(pk).values()) == {0}
    assert not Session.objects.filter(pk=pk).exists()
    assert alice.get(f"sessions/{sid}").status_code == 404
    assert alice.request("DELETE", f"sessions/{sid}").status_code == 404
    # The other session is untouched.
    other = Session.objects.get(external_id=kept)
    assert _counts(other.pk)["messages"] == before["messages"]
    assert alice.get(f"sessions/{kept}/context").status_code == 200


def test_another_keys_session_is_404_and_stays(alice, bob, make_session):
    sid = make_session(id="mine")["id"]
    assert bob.request("DELETE", f"sessions/{sid}").status_code == 404
    assert Session.objects.filter(external_id=sid).exists()


def test_the_id_can_be_used_again_after_a_delete(alice, make_session):
    sid = make_session(id="again")["id"]
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "old"}]})
    alice.request("DELETE", f"sessions/{sid}")
    again = make_session(id="again")
    assert again["message_count"] == 0


def test_a_running_compaction_does_not_bring_a_deleted_session_back(alice, make_session):
    sid = make_session(id="race")["id"]
    _fill(alice, make_session(id="other")["id"])
    alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "x " * 500}, *tool_turn("c7", "y\n" * 900)]},
    )
    session = Session.objects.get(external_id=sid)
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="drop_oldest_turns",
        enqueue=False,
    )
    # The delete lands while the run is queued; the executor then finds nothing.
    assert alice.request("DELETE", f"sessions/{sid}").status_code == 200
    assert compaction_execute(run_id=run.pk) is None
    assert not Session.objects.filter(external_id=sid).exists()
    assert not Snapshot.objects.filter(session_id=session.pk).exists()


def test_a_delete_between_plan_and_apply_writes_nothing(alice, make_session, monkeypatch):
    sid = make_session(id="mid")["id"]
    alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "x " * 500}, *tool_turn("c8", "y\n" * 900)]},
    )
    session = Session.objects.get(external_id=sid)
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="drop_oldest_turns",
        enqueue=False,
    )
    real = execute.compute_plan

    def plan_then_delete(run, summarizer):
        plan = real(run, summarizer)
        session_delete(session=session)  # the operator deletes it while the run computes
        return plan

    monkeypatch.setattr(execute, "compute_plan", plan_then_delete)
    assert compaction_execute(run_id=run.pk) is None
    assert not Session.objects.filter(pk=session.pk).exists()
    assert not Snapshot.objects.filter(session_id=session.pk).exists()
    assert not Message.objects.filter(session_id=session.pk).exists()
