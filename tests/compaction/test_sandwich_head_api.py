"""docs/concepts/compaction.md#sandwich through the service: after a sandwich compaction the
conversation's first messages (the head) stay live as real messages — the
context is [system (+ summary)], the head as posted, [the summary], the tail —
and every reader of the live window agrees: the context build, the cached
counters, snapshots (resume and restore), a failed run, retraction and the
dashboard timeline."""

from __future__ import annotations

import json

import pytest
from django.db.models import Count, Sum

from compaction.models import CompactionRun, CompactionState, Snapshot
from compaction.services.requests import compaction_request
from compaction.services.sync import compaction_run_sync
from contextsvc.engine.recall import with_search_hint
from contextsvc.engine.summarize import SummarizerError, SummaryResult
from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from sessions.dashboard.selectors.timeline import timeline_page
from sessions.dashboard.selectors.usage import usage_over_turns
from sessions.live import live_q
from sessions.models import Message, Session
from sessions.services.append import session_append_messages

from .conftest import turn

pytestmark = pytest.mark.django_db

SANDWICH = {"compaction": {"strategy": "sandwich"}}
SUMMARY = "[Earlier conversation summary: {}]"
TOOLS = [
    {
        "name": "bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


class Numbered:
    """Summary n is ``summary n``; the prompts are kept."""

    name = "numbered"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, request):
        self.prompts.append(request.prompt)
        return SummaryResult(text=f"summary {len(self.prompts)}", model="m", summarizer=self.name)


class Failing:
    name = "failing"

    def complete(self, request):
        raise SummarizerError("the model is down", transient=False)


def short_turn(t: int) -> list[dict]:
    return turn(t, output="ok: 3 passed", text_words=20)


def sandwich_session(session_factory, turns: int = 4) -> Session:
    session = session_factory(0, policy=SANDWICH)
    session.tools = TOOLS  # what PUT /tools stores: calls go out as tool_use blocks
    session.save(update_fields=["tools"])
    for t in range(turns):
        session_append_messages(session=session, messages=short_turn(t))
    session.refresh_from_db()
    return session


def compact(session: Session, summarizer) -> CompactionRun:
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="sandwich",
        enqueue=False,
    )
    return compaction_run_sync(run=run, summarizer=summarizer)


def live_rows(session: Session) -> dict:
    return Message.objects.filter(
        live_q(session), session=session, retracted_at__isnull=True
    ).aggregate(n=Count("id"), tokens=Sum("token_count"))


def window_state(session: Session) -> tuple:
    session.refresh_from_db()
    return (
        session.window_start_seq,
        session.head_end_seq,
        session.retain,
        session.summary,
        session.summary_tokens,
        session.conversation_tokens,
        session.live_message_count,
        session.used_tokens,
    )


def test_spec004_sandwich_head_messages_survive_as_messages_api(alice, session_factory):
    session = sandwich_session(session_factory)
    sid = session.external_id
    run = compact(session, Numbered())
    assert run.status == "succeeded" and run.strategies_run == ["sandwich"]
    session.refresh_from_db()
    # Turn 0 (6 messages: the top 5 grown to the next turn start) is the head.
    assert session.head_end_seq == 6 and session.window_start_seq > 7
    assert session.retain == "" and session.summary == "summary 1"
    # The cached counters cover exactly head + tail (one aggregate, no re-tokenizing later).
    rows = live_rows(session)
    assert (
        session.live_message_count
        == rows["n"]
        == 6 + session.last_seq - session.window_start_seq + 1
    )
    assert session.conversation_tokens == rows["tokens"]

    anthropic = alice.get(f"sessions/{sid}/context?format=anthropic").json()
    validate(anthropic)
    sent = anthropic["messages"]
    first = sent[0]["content"]
    assert sent[0]["role"] == "user"
    assert "Turn 0: please fix" in (first if isinstance(first, str) else first[0]["text"])
    assert [b["id"] for b in sent[1]["content"] if b["type"] == "tool_use"] == ["t0c0"]
    assert [b["tool_use_id"] for b in sent[2]["content"] if b["type"] == "tool_result"] == ["t0c0"]
    assert SUMMARY.format(with_search_hint("summary 1")) in [b["text"] for b in anthropic["system"]]
    text = json.dumps(sent)
    assert "Turn 1: please fix" not in text and "summary 1" not in text
    assert "[Start of the conversation" not in text and "[Retained context" not in text

    openai = alice.get(f"sessions/{sid}/context?format=openai").json()
    validate_chat(openai)
    msgs = openai["messages"]
    # (The session has no system prompt: the head comes first.)
    assert [m["role"] for m in msgs[:6]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert "Turn 0: please fix" in msgs[0]["content"]
    assert msgs[1]["tool_calls"][0]["id"] == "t0c0" and msgs[2]["tool_call_id"] == "t0c0"
    # the sandwich's layout (docs/concepts/context-build.md#head-layout): top, the summary as a
    # system message, bottom.
    assert msgs[6] == {"role": "system", "content": SUMMARY.format(with_search_hint("summary 1"))}
    assert sum("summary 1" in json.dumps(m) for m in msgs) == 1

    raw = alice.get(f"sessions/{sid}/context?format=raw").json()
    assert raw["head_count"] == 6
    assert [m["seq"] for m in raw["messages"][:7]] == [1, 2, 3, 4, 5, 6, session.window_start_seq]
    assert alice.get(f"sessions/{sid}").json()["head_end_seq"] == 6


def test_spec004_sandwich_repeated_compaction_keeps_the_head_and_merges_summaries(
    alice, session_factory
):
    session = sandwich_session(session_factory)
    summarizer = Numbered()
    compact(session, summarizer)
    first_start = Session.objects.get(pk=session.pk).window_start_seq
    for t in (4, 5):
        session_append_messages(session=session, messages=short_turn(t))
    run = compact(session, summarizer)
    assert run.status == "succeeded" and run.changed
    session.refresh_from_db()
    assert session.head_end_seq == 6 and session.window_start_seq > first_start
    assert session.summary == "summary 2"
    # Incremental: the first summary is merged with what left the tail, and
    # neither the head nor the first middle is sent to the summariser again.
    prompt = summarizer.prompts[-1]
    assert "summary 1" in prompt
    assert "Turn 0: please fix" not in prompt and "Turn 1: please fix" not in prompt
    state = CompactionState.objects.get(session=session)
    assert (state.range_start, state.summary) == (6, "summary 2")
    rows = live_rows(session)
    assert (session.live_message_count, session.conversation_tokens) == (rows["n"], rows["tokens"])
    body = alice.get(f"sessions/{session.external_id}/context?format=anthropic").json()
    validate(body)
    assert "Turn 0: please fix" in json.dumps(body["messages"][0])


def test_spec004_sandwich_snapshot_resume_and_restore_keep_head_summary_tail(
    alice, session_factory
):
    session = sandwich_session(session_factory)
    sid = session.external_id
    summarizer = Numbered()
    compact(session, summarizer)
    after_first = alice.get(f"sessions/{sid}/context?format=raw").json()
    first = Snapshot.objects.filter(session=session).order_by("-id").first()
    assert first.head_end_seq == 6
    assert [m["seq"] for m in first.messages[:6]] == [1, 2, 3, 4, 5, 6]

    resume = alice.get(f"sessions/{sid}/snapshot").json()
    assert resume["head_end_seq"] == 6 and resume["summary"] == "summary 1"
    assert [m["seq"] for m in resume["messages"]] == [m["seq"] for m in after_first["messages"]]
    assert resume["snapshot"]["head_end_seq"] == 6

    for t in (4, 5):
        session_append_messages(session=session, messages=short_turn(t))
    compact(session, summarizer)
    # Restoring the first compaction brings its head, summary and tail back.
    response = alice.post(f"sessions/{sid}/snapshots/{first.pk}/restore", {})
    assert response.status_code == 200, response.content
    assert response.json()["session"]["head_end_seq"] == 6
    restored = alice.get(f"sessions/{sid}/context?format=raw").json()
    seqs = [m["seq"] for m in restored["messages"]]
    assert seqs[: len(after_first["messages"])] == [m["seq"] for m in after_first["messages"]]
    assert restored["summary"] == "summary 1" and restored["head_count"] == 6
    session.refresh_from_db()
    rows = live_rows(session)
    assert (session.live_message_count, session.conversation_tokens) == (rows["n"], rows["tokens"])
    # The uncompacted transcript: no head, no gap.
    alice.post(f"sessions/{sid}/snapshots/uncompacted/restore", {})
    session.refresh_from_db()
    assert (session.head_end_seq, session.window_start_seq) == (0, 1)
    assert session.live_message_count == session.message_count


def test_spec004_sandwich_failed_compaction_leaves_the_session_unchanged(alice, session_factory):
    session = sandwich_session(session_factory)
    sid = session.external_id
    compact(session, Numbered())
    for t in (4, 5):
        session_append_messages(session=session, messages=short_turn(t))
    context = alice.get(f"sessions/{sid}/context?format=anthropic").json()
    before = window_state(session)
    state = CompactionState.objects.values("summary", "range_start", "range_end").get(
        session=session
    )
    snapshots = Snapshot.objects.filter(session=session).count()
    run = compact(session, Failing())
    assert run.status == "failed"
    assert window_state(session) == before
    after = alice.get(f"sessions/{sid}/context?format=anthropic").json()
    assert (after["system"], after["messages"]) == (context["system"], context["messages"])
    assert (
        CompactionState.objects.values("summary", "range_start", "range_end").get(session=session)
        == state
    )
    assert Snapshot.objects.filter(session=session).count() == snapshots


def test_spec004_sandwich_retract_keeps_the_head(alice, session_factory):
    session = sandwich_session(session_factory)
    sid = session.external_id
    compact(session, Numbered())
    session.refresh_from_db()
    into_head = alice.post(f"sessions/{sid}/messages/retract", {"from_seq": 3})
    assert into_head.status_code == 422
    assert "head" in into_head.json()["error"]["message"]
    too_many = alice.post(f"sessions/{sid}/messages/retract", {"last": session.live_message_count})
    assert too_many.status_code == 422
    ok = alice.post(f"sessions/{sid}/messages/retract", {"last": 1})
    assert ok.status_code == 200, ok.content
    session.refresh_from_db()
    assert session.head_end_seq == 6
    rows = live_rows(session)
    assert (session.live_message_count, session.conversation_tokens) == (rows["n"], rows["tokens"])
    validate(alice.get(f"sessions/{sid}/context?format=anthropic").json())


def test_spec004_sandwich_timeline_marks_the_head_live_and_the_middle_summarised(
    session_factory,
):
    session = sandwich_session(session_factory)
    compact(session, Numbered())
    session.refresh_from_db()
    page = timeline_page(session, limit=200)
    by_seq = {}
    for t in page.turns:
        for step in t.steps:
            by_seq[step.message.seq] = step.message
            by_seq.update({c.result.seq: c.result for c in step.calls if c.result})
    assert all(not by_seq[s].compacted and "head" in by_seq[s].badges for s in range(1, 7))
    assert by_seq[7].compacted and "summarised" in by_seq[7].badges
    tail = by_seq[session.window_start_seq]
    assert not tail.compacted and "head" not in tail.badges


def test_spec004_sandwich_usage_chart_counts_the_head_in_the_window(session_factory):
    session = sandwich_session(session_factory)
    compact(session, Numbered())
    session.refresh_from_db()
    now = usage_over_turns(session).bars[-1]
    assert now.now
    # The bar after the compaction is the window as it is: head + tail, and the summary.
    assert now.conversation + now.outputs == session.conversation_tokens
    assert now.summary == session.summary_tokens
