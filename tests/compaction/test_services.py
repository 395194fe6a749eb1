"""Compaction services, called directly (no worker, no eager mode)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from compaction import selectors
from compaction.models import CompactionRun, CompactionState, Snapshot, ViewChange
from compaction.services.apply import apply_plan
from compaction.services.execute import RetryableCompactionError, _claim, compaction_execute
from compaction.services.plan import compute_plan
from compaction.services.requests import (
    compaction_auto_request,
    compaction_request,
    compaction_requeue_stale,
)
from compaction.services.snapshots import snapshot_restore
from compaction.services.sync import compaction_overflow, compaction_run_sync
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.summarize import SummarizerError
from contextsvc.errors import ValidationFailed
from prompting.context.build import context_preview
from sessions.models import Message, Session
from sessions.selectors import live_messages
from sessions.services.append import session_append_messages
from sessions.services.usage import session_record_usage
from tests.conftest import tool_turn

from .conftest import turn

pytestmark = pytest.mark.django_db


class Failing:
    name = "failing"

    def __init__(self, transient: bool = False) -> None:
        self.transient = transient
        self.calls = 0

    def complete(self, request):
        self.calls += 1
        raise SummarizerError("model overloaded", transient=self.transient, status=529)


class Appending:
    """A summariser that lets the agent append while it "thinks" (no lock is held)."""

    name = "appending"

    def __init__(self, session: Session, messages: list[dict]) -> None:
        self.session, self.messages, self.done = session, messages, False

    def complete(self, request):
        if not self.done:
            self.done = True
            session_append_messages(session=self.session, messages=self.messages)
        return OfflineSummarizer().complete(request)


def session_state(session: Session) -> dict:
    """Everything a compaction could touch, for byte-for-byte comparisons."""
    session.refresh_from_db()
    return {
        "session": model_to_dict(Session.objects.get(pk=session.pk)),
        "messages": list(Message.objects.filter(session=session).order_by("seq").values()),
        "snapshots": Snapshot.objects.filter(session=session).count(),
        "context": context_preview(session, "raw")["messages"],
    }


def manual(session: Session, summarizer=None, **kw) -> CompactionRun:
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False, **kw
    )
    return compaction_run_sync(run=run, summarizer=summarizer)


# --- triggering -------------------------------------------------------------------------


def test_auto_trigger_after_assistant_message_at_compact_tier(
    session_factory, enqueued, django_capture_on_commit_callbacks
):
    session = session_factory(6)  # ~11,000 of 13,000 tokens: ok
    assert session.guard_status == "ok"
    with django_capture_on_commit_callbacks(execute=True):
        session_append_messages(session=session, messages=turn(6))
    session.refresh_from_db()
    assert session.guard_status in ("compact", "block")
    run = CompactionRun.objects.get(session=session)
    assert (run.trigger, run.status, run.forced) == ("auto", "queued", False)
    assert enqueued == [(str(run.pk), run.celery_task_id)]  # sent once the append committed


def test_no_auto_trigger_after_a_user_message(session_factory, django_capture_on_commit_callbacks):
    session = session_factory(6)
    big = {"role": "user", "content": "please " + "look at this " * 1500}
    with django_capture_on_commit_callbacks(execute=True):
        session_append_messages(session=session, messages=[big])
    session.refresh_from_db()
    assert session.guard_status != "ok"
    assert not CompactionRun.objects.exists()


def test_auto_trigger_on_reported_usage(session_factory, django_capture_on_commit_callbacks):
    session = session_factory(2)
    with django_capture_on_commit_callbacks(execute=True):
        session_record_usage(session=session, usage={"input_tokens": 12_500, "output_tokens": 100})
    assert CompactionRun.objects.filter(session=session, trigger="auto").exists()


def test_auto_trigger_respects_policy_auto_false(
    session_factory, django_capture_on_commit_callbacks
):
    session = session_factory(6, policy={"compaction": {"auto": False}})
    with django_capture_on_commit_callbacks(execute=True):
        session_append_messages(session=session, messages=turn(6))
    assert not CompactionRun.objects.exists()


def test_threshold_ratio_policy_triggers_earlier_spec000(
    session_factory, django_capture_on_commit_callbacks
):
    session = session_factory(3, policy={"compaction": {"threshold_ratio": 0.5}})
    with django_capture_on_commit_callbacks(execute=True):
        session_append_messages(session=session, messages=turn(3))
    session.refresh_from_db()
    assert session.guard_status == "ok" and session.used_tokens >= 6_500
    assert CompactionRun.objects.filter(session=session).exists()


def test_second_request_joins_the_active_run(session_factory):
    session = session_factory(3)
    first, created = compaction_request(
        session=session, trigger="auto", reason={"kind": "threshold"}
    )
    second, created2 = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}
    )
    assert created and not created2 and second.pk == first.pk
    assert CompactionRun.objects.count() == 1


def test_emergency_never_waits_for_the_active_run(session_factory):
    session = session_factory(3)
    compaction_request(session=session, trigger="auto", reason={"kind": "threshold"})
    run = compaction_overflow(session=session)
    assert run.trigger == "emergency" and run.status == "succeeded"


def test_empty_session_is_validation_error_cx_nt2(session_factory):
    session = session_factory(0)
    with pytest.raises(ValidationFailed, match="Conversation has no messages"):
        compaction_request(session=session, trigger="manual", reason={"kind": "manual"})
    assert not CompactionRun.objects.exists()


# --- running ------------------------------------------------------------------------------


def test_compaction_shrinks_window_keeps_transcript_and_writes_snapshot(session_factory):
    session = session_factory(8)
    total = Message.objects.filter(session=session).count()
    run = manual(session, strategy="summarize")
    session.refresh_from_db()
    assert run.status == "succeeded" and run.changed
    assert run.strategies_run == ["summarize"]
    assert run.after_tokens < run.before_tokens and run.after_msg_count < run.before_msg_count
    # docs/concepts/compaction.md#retain-summary: retain + summary + the last turn.
    live = live_messages(session)
    assert live[0].role == "user" and live[0].text.startswith("Turn 7:")
    assert session.summary and session.retain
    assert session.live_message_count == len(live) == 6
    assert session.conversation_tokens == sum(m.token_count for m in live)
    assert session.summary_tokens > 0
    # The transcript is never deleted.
    assert Message.objects.filter(session=session).count() == total
    snap = Snapshot.objects.get(run=run)
    assert snap.window_start_seq == session.window_start_seq == live[0].seq
    assert [m["seq"] for m in snap.messages] == [m.seq for m in live]
    assert snap.token_count == run.after_tokens


def test_context_after_compaction_is_rebuilt_from_the_window_spec000_2_7_1(session_factory):
    from contextsvc.engine.build import RETAIN_HEADER, SUMMARY_HEADER

    session = session_factory(8)
    manual(session, strategy="summarize")
    session.refresh_from_db()
    for fmt in ("anthropic", "openai", "raw"):
        body = context_preview(session, fmt)
        texts = []
        for m in body["messages"]:
            content = m["content"]
            blocks = content if isinstance(content, list) else [{"text": content}]
            texts.extend(str(b.get("text") or b.get("content") or "") for b in blocks)
        history = [t for t in texts if not t.startswith((RETAIN_HEADER, SUMMARY_HEADER))]
        # Only the summary may mention the compacted turns; no message of them is sent.
        assert not any("Turn 0:" in t or "boom 0." in t for t in history), fmt
        assert "t0c0" not in str(body["messages"])
        if fmt == "raw":
            assert min(m["seq"] for m in body["messages"]) == session.window_start_seq
    anthropic = context_preview(session, "anthropic")["messages"]
    assert anthropic[0]["content"][0]["text"].startswith("[Retained context")
    ids_used = {b["id"] for m in anthropic for b in m["content"] if b["type"] == "tool_use"}
    ids_answered = {
        b["tool_use_id"] for m in anthropic for b in m["content"] if b["type"] == "tool_result"
    }
    assert ids_used == ids_answered


def test_appends_during_compaction_are_kept_after_the_summary(session_factory):
    session = session_factory(8)
    late = [{"role": "user", "content": "A late request arriving mid-compaction"}]
    summarizer = Appending(session, late)
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    run = compaction_execute(run_id=run.pk, summarizer=summarizer)
    assert run.status == "succeeded" and summarizer.done
    session.refresh_from_db()
    live = live_messages(session)
    assert live[-1].text == "A late request arriving mid-compaction"
    assert live[-1].seq == session.last_seq > run.through_seq
    assert session.live_message_count == len(live)
    assert session.conversation_tokens == sum(m.token_count for m in live)
    snap = Snapshot.objects.get(run=run)
    assert snap.through_seq == run.through_seq  # resume = snapshot + the later message
    resume = selectors.session_resume(session)
    assert [m["seq"] for m in resume["later_messages"]] == [live[-1].seq]


def test_window_moved_during_compaction_is_recomputed(session_factory):
    session = session_factory(8)

    class Overflowing:
        name = "overflowing"
        calls = 0

        def complete(self, request):
            Overflowing.calls += 1
            if Overflowing.calls == 1:
                compaction_overflow(session=session)  # moves the window meanwhile
            return OfflineSummarizer().complete(request)

    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    run = compaction_execute(run_id=run.pk, summarizer=Overflowing())
    assert run.status == "succeeded" and Overflowing.calls == 2
    session.refresh_from_db()
    assert run.base_window_start_seq > 1  # computed again from the moved window
    assert session.live_message_count == len(live_messages(session))


def test_failure_leaves_session_byte_for_byte_unchanged_cx_nt3(session_factory):
    session = session_factory(8, policy={"compaction": {"strategy": "sandwich"}})
    CompactionState.objects.create(
        session=session, strategy="sandwich", summary="Cached.", range_start=5, range_end=20
    )
    before = session_state(session)
    cached_before = model_to_dict(CompactionState.objects.get(session=session))
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    run = compaction_execute(run_id=run.pk, summarizer=Failing())
    assert run.status == "failed" and run.error_code == "SERVICE_UNAVAILABLE"
    assert "model overloaded" in run.error
    assert session_state(session) == before
    cached = model_to_dict(CompactionState.objects.get(session=session))
    assert {k: cached[k] for k in ("strategy", "summary", "range_start", "range_end")} == {
        k: cached_before[k] for k in ("strategy", "summary", "range_start", "range_end")
    }
    assert not ViewChange.objects.exists()


def test_transient_failure_is_released_for_retry_then_succeeds(session_factory):
    session = session_factory(8)
    run, _ = compaction_request(
        session=session,
        trigger="auto",
        reason={"kind": "threshold"},
        strategy="summarize",
        enqueue=False,
    )
    with pytest.raises(RetryableCompactionError):
        compaction_execute(
            run_id=run.pk, task_id="t1", can_retry=True, summarizer=Failing(transient=True)
        )
    run.refresh_from_db()
    assert run.status == "queued" and run.error_code == "SERVICE_UNAVAILABLE"
    assert not Snapshot.objects.exists()
    run = compaction_execute(run_id=run.pk, task_id="t1", can_retry=True)
    assert run.status == "succeeded" and run.attempts == 2 and run.error_code == ""


def test_execute_twice_is_a_no_op(session_factory):
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    first = compaction_execute(run_id=run.pk, task_id="a")
    again = compaction_execute(run_id=run.pk, task_id="a")
    assert first.status == again.status == "succeeded"
    assert Snapshot.objects.filter(session=session).count() == 1
    assert compaction_execute(run_id="00000000-0000-0000-0000-000000000000") is None


def test_redelivered_message_takes_over_a_run_left_running(session_factory):
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="auto", reason={"kind": "threshold"}, enqueue=False
    )
    run.celery_task_id = "task-1"
    run.save()
    # A worker claimed it and was killed before applying anything.
    claimed = _claim(run.pk, "task-1")
    assert claimed is not None
    before = session_state(session)
    # Another message for the same run (a duplicate) leaves it to its holder…
    assert compaction_execute(run_id=run.pk, task_id="task-2").status == "running"
    assert session_state(session) == before
    # …the redelivered one (same task id, reject_on_worker_lost) takes it over.
    done = compaction_execute(run_id=run.pk, task_id="task-1")
    assert done.status == "succeeded" and done.attempts == 2


def test_expired_lease_is_taken_over_and_stale_runs_are_requeued(session_factory, enqueued):
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="auto", reason={"kind": "threshold"}, enqueue=False
    )
    _claim(run.pk, "dead-worker")
    CompactionRun.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert compaction_requeue_stale() == 1
    run.refresh_from_db()
    assert run.status == "queued" and enqueued == []  # sent on commit (none here: db test)
    done = compaction_execute(run_id=run.pk, task_id="new-worker")
    assert done.status == "succeeded"


def test_superseded_attempt_does_not_apply(session_factory):
    session = session_factory(8)
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    old_run, attempt = _claim(run.pk, "w1")
    plan = compute_plan(old_run, None)
    CompactionRun.objects.filter(pk=run.pk).update(attempts=attempt + 1)  # someone took it over
    result = apply_plan(old_run, attempt, plan, 0.0)
    assert result.status == "running"
    assert not Snapshot.objects.exists()


# --- circuit breaker --------------------------------------------------------------------------


def test_circuit_breaker_opens_after_three_failed_auto_runs(session_factory, monkeypatch):
    session = session_factory(8, policy={"compaction": {"strategy": "summarize"}})
    monkeypatch.setattr("compaction.summarizers.for_session", lambda **kw: Failing())
    for _ in range(3):
        run = compaction_auto_request(session=session, reason={"kind": "threshold"})
        assert run is not None
        compaction_execute(run_id=run.pk)
    assert selectors.budget_block(session)["compaction"]["circuit_breaker"]["open"]
    assert selectors.budget_block(session)["compaction"]["auto"] is False
    assert compaction_auto_request(session=session, reason={"kind": "threshold"}) is None
    body = context_preview(session, "raw")
    assert body["budget"]["compaction"]["circuit_breaker"]["consecutive_failures"] == 3
    # Manual runs still work, and a success closes the breaker.
    monkeypatch.undo()
    run = manual(session)
    assert run.status == "succeeded"
    assert not selectors.budget_block(session)["compaction"]["circuit_breaker"]["open"]


def test_failed_manual_runs_do_not_count_toward_the_breaker(session_factory):
    session = session_factory(8)
    for _ in range(3):
        run, _ = compaction_request(
            session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False
        )
        compaction_execute(run_id=run.pk, summarizer=Failing())
    assert not selectors.budget_block(session)["compaction"]["circuit_breaker"]["open"]


def test_no_auto_run_right_after_one_that_changed_nothing(session_factory):
    session = session_factory(1)
    run, _ = compaction_request(
        session=session, trigger="auto", reason={"kind": "threshold"}, enqueue=False
    )
    run = compaction_execute(run_id=run.pk)
    assert run.status == "succeeded" and not run.changed  # far under the target
    assert compaction_auto_request(session=session, reason={"kind": "threshold"}) is None


# --- strategies through the store ----------------------------------------------------------------


def test_tool_clearing_persists_views_and_logs_the_old_ones(session_factory):
    session = session_factory(
        8, policy={"compaction": {"keep_tool_uses": 2, "clear_tool_inputs": True}}
    )
    run = manual(session, strategy="tool_clearing")
    assert run.strategies_run == ["tool_clearing"]
    session.refresh_from_db()
    tools = list(Message.objects.filter(session=session, role="tool").order_by("seq"))
    assert [t.view_state for t in tools[-2:]] != ["cleared", "cleared"]
    cleared = [t for t in tools if t.view_state == "cleared"]
    assert len(cleared) == len(tools) - 2
    # docs/concepts/compaction.md#tool-clearing: the note names the original size.
    assert all(
        re.fullmatch(rf"\[tool output cleared; ref={t.output_ref}; was [\d,]+ bytes\]", t.view)
        for t in cleared
    )
    assert ViewChange.objects.filter(snapshot__run=run).count() >= len(cleared)
    # The context sends placeholders and no inputs for cleared calls.
    raw = context_preview(session, "raw")["messages"]
    first_call = next(m for m in raw if m.get("tool_calls"))
    assert first_call["tool_calls"][0]["arguments"] == {}
    stored = Message.objects.get(session=session, seq=first_call["seq"])
    assert stored.tool_calls[0]["arguments"]  # the transcript keeps them
    assert session.conversation_tokens == sum(m.token_count for m in live_messages(session))


# A shallow target (the default before the cost-aware planner): clearing alone gets under it.
SHALLOW = {"compaction": {"target_ratio": 0.7}}


def test_chain_stops_at_the_target(session_factory):
    session = session_factory(8, policy=SHALLOW)
    run, _ = compaction_request(
        session=session, trigger="auto", reason={"kind": "threshold"}, enqueue=False
    )
    run = compaction_execute(run_id=run.pk)
    assert run.strategies_run == ["tool_clearing"]
    assert run.after_tokens <= run.target_tokens


def test_forced_chain_runs_fully_with_instructions(session_factory):
    session = session_factory(8)
    recorded = []

    class Recording(OfflineSummarizer):
        def complete(self, request):
            recorded.append(request)
            return super().complete(request)

    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        instructions="Keep the parser decisions",
        enqueue=False,
    )
    run = compaction_execute(run_id=run.pk, summarizer=Recording())
    assert run.strategies_run == ["tool_clearing", "summarize"]
    assert "- Keep the parser decisions" in recorded[0].prompt


def test_retain_last_turns_override(session_factory):
    session = session_factory(8, policy=SHALLOW)
    manual(session, strategy="summarize", retain_last_turns=3)
    session.refresh_from_db()
    users = [m for m in live_messages(session) if m.role == "user"]
    assert [u.text[:6] for u in users] == ["Turn 5", "Turn 6", "Turn 7"]


def test_retention_is_recorded(session_factory):
    # Without the search tool, what a drop takes out of the window is lost.
    session = session_factory(8, policy={"proxy": {"builtin_tools": False}})
    run = manual(session, strategy="drop_oldest_turns")
    assert run.retention is not None and 0 <= run.retention_score < 1
    lost = run.retention["lost"]
    assert any(f["kind"] == "request" and f["text"].startswith("Turn 0") for f in lost)
    detail = selectors.run_to_dict(run)
    assert detail["retention"]["lost_count"] == len(lost)


def test_dropped_facts_the_search_finds_are_recoverable(session_factory):
    session = session_factory(8)  # history_search on (the default)
    run = manual(session, strategy="drop_oldest_turns")
    lost = run.retention["lost"]
    assert not any(f["text"].startswith("Turn 0") for f in lost), lost
    assert run.retention["recoverable"] > 0


def test_open_tool_call_stays_live_and_abandoned_calls_are_closed(session_factory):
    session = session_factory(6)
    session_append_messages(
        session=session,
        messages=[
            {"role": "user", "content": "Start"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "old", "name": "bash", "arguments": {}}],
            },
            {"role": "user", "content": "never mind, do this " + "x " * 2000},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "pending", "name": "bash", "arguments": {}}],
            },
        ],
    )
    session.refresh_from_db()
    assert set(session.open_tool_calls) == {"old", "pending"}
    manual(session, strategy="summarize", retain_last_turns=0)
    session.refresh_from_db()
    assert set(session.open_tool_calls) == {"pending"}
    session_append_messages(
        session=session, messages=[{"role": "tool", "tool_call_id": "pending", "content": "ok"}]
    )
    with pytest.raises(ValidationFailed):
        session_append_messages(
            session=session, messages=[{"role": "tool", "tool_call_id": "old", "content": "late"}]
        )


def test_emergency_overflow_drops_oldest_turns_with_note_spec003(session_factory):
    session = session_factory(8)
    run = compaction_overflow(session=session)
    assert run.strategies_run == ["drop_oldest_turns"] and run.trigger == "emergency"
    session.refresh_from_db()
    assert "provider reported the context too long" in session.summary
    assert all("Context compressed" not in m.text for m in live_messages(session))


def test_sandwich_caches_summary_and_reuses_it_while_valid_spec004(session_factory):
    session = session_factory(8, policy={"compaction": {"strategy": "sandwich"}})
    calls = []

    class Counting(OfflineSummarizer):
        def complete(self, request):
            calls.append(request.kind)
            return super().complete(request)

    run = manual(session, summarizer=Counting())
    assert run.strategies_run == ["sandwich"] and calls == ["compress"]
    state = CompactionState.objects.get(session=session)
    # Top 5 grown to the next turn start (6): the head is turn 0, whole.
    assert (state.strategy, state.range_start) == ("sandwich", 6)
    assert state.range_end == session.last_seq - 5
    session.refresh_from_db()
    # The top stays live as messages (the head), not quoted in the retain slot.
    assert session.head_end_seq == 6 and "Turn 0: please fix" not in session.retain
    # The middle grows: re-compressed (incrementally), the state follows.
    session_append_messages(session=session, messages=turn(8))
    manual(session, summarizer=Counting())
    state.refresh_from_db()
    session.refresh_from_db()
    assert calls == ["compress", "compress"]
    assert (state.range_start, state.range_end) == (6, session.last_seq - 5)
    assert session.head_end_seq == 6


# --- blobs are never read ---------------------------------------------------------------------


def test_window_loader_reads_views_never_blobs(session_factory):
    session = session_factory(0)
    big = "\n".join(f"line {i} " + "x" * 100 for i in range(3000))  # ~300 KB: cut to a view
    session_append_messages(
        session=session, messages=[{"role": "user", "content": "go"}, *tool_turn("c1", big)]
    )
    row = Message.objects.get(session=session, role="tool")
    assert row.view is not None
    with CaptureQueriesContext(connection) as queries:
        msgs = selectors.window_messages(session, start_seq=1)
    sql = " ".join(q["sql"].lower() for q in queries.captured_queries)
    assert "tooloutput" not in sql
    assert msgs[-1].content == "" and msgs[-1].context_text == row.view
    run = manual(session, strategy="tool_clearing")
    assert "tooloutput" not in sql and run is not None


# --- restore ------------------------------------------------------------------------------------


def test_restore_earlier_snapshot_and_uncompacted(session_factory):
    session = session_factory(8)
    total = Message.objects.filter(session=session).count()
    original = session_state(session)
    first = manual(session, strategy="tool_clearing")
    session.refresh_from_db()
    after_first = session_state(session)["context"]
    second = manual(session, strategy="summarize")
    assert second.changed
    snap_a = Snapshot.objects.get(run=first)
    restored = snapshot_restore(session=session, snapshot_id=snap_a.pk)
    assert restored.kind == "restore" and restored.restored_from_id == snap_a.pk
    session.refresh_from_db()
    assert session_state(session)["context"] == after_first
    assert session.window_start_seq == snap_a.window_start_seq and session.summary == ""
    # The uncompacted transcript: every view back as it was, nothing deleted.
    snapshot_restore(session=session, snapshot_id=None)
    now = session_state(session)
    assert now["context"] == original["context"]
    assert [{k: v for k, v in m.items()} for m in now["messages"]] == original["messages"]
    assert now["session"]["conversation_tokens"] == original["session"]["conversation_tokens"]
    assert Message.objects.filter(session=session).count() == total
    assert Snapshot.objects.filter(session=session).count() == 4
    assert selectors.session_resume(session)["snapshot"]["uncompacted"] is True


def test_restore_unknown_snapshot_is_404(session_factory):
    from contextsvc.errors import NotFound

    session = session_factory(2)
    with pytest.raises(NotFound):
        snapshot_restore(session=session, snapshot_id=999)
