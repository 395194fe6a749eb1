"""The tree strategy (docs/concepts/compaction.md#tree) through the service and the API: selectable
per session, validated knobs, O(new chunk) per compaction, a well-formed context, failures change
nothing."""

from __future__ import annotations

import pytest

from compaction.models import CompactionRun
from compaction.services.requests import compaction_request
from compaction.services.sync import compaction_run_sync
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.strategies.tree import parse_tree
from contextsvc.engine.summarize import SummarizerError
from sessions.models import Message, Session
from sessions.services.append import session_append_messages

from .conftest import turn

pytestmark = pytest.mark.django_db

TREE = {"compaction": {"strategy": "tree", "chunk_size": 4, "levels": 2}}


class Counting:
    """The offline summariser, keeping the seqs of every message it was asked to read."""

    name = "offline"

    def __init__(self) -> None:
        self.inner = OfflineSummarizer()
        self.read: list[list[int]] = []

    def complete(self, request):
        self.read.append([m.seq for m in request.source if m.seq is not None])
        return self.inner.complete(request)


def compact(session: Session, summarizer=None) -> CompactionRun:
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    return compaction_run_sync(run=run, summarizer=summarizer)


def turn_seqs(session: Session, t: int) -> list[int]:
    first = Message.objects.get(session=session, content__startswith=f"Turn {t}:").seq
    after = Message.objects.filter(session=session, content__startswith=f"Turn {t + 1}:").first()
    last = after.seq - 1 if after else session.last_seq
    return list(range(first, last + 1))


def test_tree_is_selectable_per_session_and_keeps_the_context_well_formed(alice, session_factory):
    session = session_factory(6, policy=TREE)
    sid = session.external_id
    body = alice.post(f"sessions/{sid}/compact", {"wait": True}).json()
    assert body["status"] == "succeeded" and body["result"]["strategies_run"] == ["tree"]
    context = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert "[Summary L1 of messages" in context["summary"]
    assert "Turn 0: please fix src/app/mod0.py" in context["retain"]  # the task, verbatim
    called: set[str] = set()
    for msg in context["messages"]:
        called.update(c["id"] for c in msg.get("tool_calls") or [])
        if msg["role"] == "tool":
            assert msg["tool_call_id"] in called  # no result without its call
    assert context["messages"][0]["content"].startswith("Turn 5:")


def test_a_later_tree_compaction_summarises_only_the_new_chunk(session_factory):
    session = session_factory(6, policy=TREE)
    first = Counting()
    assert compact(session, first).strategies_run == ["tree"]
    read_first = sorted(s for seqs in first.read for s in seqs)
    assert read_first == list(range(2, turn_seqs(session, 5)[0]))  # all but the task and turn 5
    session_append_messages(session=session, messages=turn(6))
    session.refresh_from_db()
    second = Counting()
    assert compact(session, second).strategies_run == ["tree"]
    # The leaves read turn 5 (what left the window) once; a roll-up reads summaries only.
    leaves = [seqs for seqs in second.read if seqs]
    assert sorted(s for seqs in leaves for s in seqs) == turn_seqs(session, 5)
    assert len(second.read) - len(leaves) <= 1
    session.refresh_from_db()
    nodes = parse_tree(session.summary, 2, session.window_start_seq)
    assert nodes[-1].last == turn_seqs(session, 5)[-1] and nodes[0].first == 2


def test_a_failed_tree_run_leaves_the_session_unchanged_cx_nt3(alice, session_factory, monkeypatch):
    class Down:
        name = "down"

        def complete(self, request):
            raise SummarizerError("overloaded", transient=False, status=400)

    session = session_factory(6, policy=TREE)
    compact(session)  # a tree already in the summary slot
    session_append_messages(session=session, messages=turn(6))
    monkeypatch.setattr("compaction.summarizers.for_session", lambda **kw: Down())
    sid = session.external_id
    before_row = Session.objects.filter(pk=session.pk).values().get()
    before_ctx = alice.get(f"sessions/{sid}/context", format="raw").json()
    response = alice.post(f"sessions/{sid}/compact", {"wait": True, "strategy": "tree"})
    assert response.status_code == 503
    assert Session.objects.filter(pk=session.pk).values().get() == before_row
    after_ctx = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert (after_ctx["messages"], after_ctx["summary"]) == (
        before_ctx["messages"],
        before_ctx["summary"],
    )


@pytest.mark.parametrize(
    "knob", [{"chunk_size": 1}, {"chunk_size": 10_001}, {"levels": 0}, {"levels": 9}]
)
def test_tree_knobs_are_validated_with_bounds(alice, knob):
    response = alice.post(
        "sessions", {"model": "claude-sonnet-4-5", "policy": {"compaction": knob}}
    )
    assert response.status_code == 422, response.content
    assert next(iter(knob)) in response.json()["error"]["message"]


def test_tree_knobs_are_stored_and_shown_in_the_session_policy(alice):
    body = {"model": "claude-sonnet-4-5", "policy": TREE}
    response = alice.post("sessions", body)
    assert response.status_code == 201, response.content
    assert (
        response.json()["policy"]["compaction"] | TREE["compaction"]
        == (response.json()["policy"]["compaction"])
    )
