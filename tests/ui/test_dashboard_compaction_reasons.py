"""The run cards of the Compactions tab say why each run ran, in one sentence with its
numbers (docs/concepts/compaction.md#reasons); a run recorded before reasons were
renders without one."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils.html import escape

from compaction.models import CompactionRun
from compaction.reason_text import reason_text
from compaction.services.execute import compaction_execute
from compaction.services.hooks import on_session_activity
from compaction.services.sync import compaction_overflow
from compaction.services.tool import compact_context_tool
from proxy.services.responses_compaction import session_compact_for_client
from sessions import accounting
from sessions.services.sessions import session_update
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


@pytest.fixture
def big(make_dash_session):
    return make_dash_session(turns=6, calls_per_turn=2, tool_lines=300)


def _history(op, session) -> str:
    response = op.get(reverse("dashboard:compaction_history", args=[session.pk]), headers=HX)
    assert response.status_code == 200
    return response.content.decode()


def _why(run: CompactionRun) -> str:
    return f"<strong>Why:</strong> {escape(reason_text(run.reason))}."


def test_a_run_started_from_the_dashboard_names_the_operator(op, operator, big):
    guard = accounting.compute_budget(big).guard  # the provider's usage calibrated it
    used, compact_at = guard.projected, guard.compact_at
    op.post(
        reverse("dashboard:compact_start", args=[big.pk]),
        {"strategy": "chain", "retain_last_turns": 1},
        headers=HX,
    )
    run = CompactionRun.objects.get(session=big)
    assert run.reason["kind"] == "manual" and run.reason["via"] == "dashboard"
    assert run.reason["operator"] == operator.get_username() == "operator"
    compaction_execute(run_id=run.pk)
    body = _history(op, big)
    assert (
        f"<strong>Why:</strong> manual, from the dashboard by operator operator"
        f" (at {used:,} used, compact-at {compact_at:,})." in body
    )


def test_each_path_reads_as_a_sentence_on_its_card(op, big):
    # An operator lowers compact-at; the next check point asks for an automatic run.
    policy = {"thresholds": {"compact_at": 0.3, "block_at": 0.98}}
    big = session_update(session=big, data={"policy": policy}, actor="operator operator")
    state = accounting.compute_budget(big)
    assert state.guard.status == "compact"
    on_session_activity(big, state, "assistant")
    auto = CompactionRun.objects.get(session=big, trigger="auto")
    compaction_execute(run_id=auto.pk)
    big.refresh_from_db()
    tool_run = CompactionRun.objects.get(pk=compact_context_tool(big, {})["run_id"])
    big.refresh_from_db()
    emergency = compaction_overflow(session=big, reported_tokens=40_000, source="api")
    big.refresh_from_db()
    assert session_compact_for_client(session=big, form="compact") is not None
    client = CompactionRun.objects.get(session=big, trigger="client")
    body = _history(op, big)
    for run in (auto, tool_run, emergency, client):
        run.refresh_from_db()
        assert run.reason, run.trigger
        assert _why(run) in body, (run.trigger, reason_text(run.reason))
    assert (
        f"threshold crossed: {auto.reason['used']:,} used ≥ {state.guard.compact_at:,} compact-at"
        in body
    )
    assert "by operator operator)" in body and "thresholds.compact_at default → 0.3" in body
    assert "the agent called compact_context (at " in body
    assert (
        "the client reported a context overflow (POST /overflow): the provider counted 40,000"
        in (body)
    )
    assert "the client compacted its own history, with POST /responses/compact (at " in body
    # The card's before/after counts the history only, and says so.
    assert 'data-figure="history-only"' in body


def test_a_run_recorded_before_reasons_renders_without_one(op, big):
    CompactionRun.objects.create(
        session=big, trigger="auto", status="succeeded", before_tokens=10_572, changed=False
    )
    body = _history(op, big)
    assert "Nothing to compact: the window could not be made smaller (10,572 tokens)." in body
    assert "Why:" not in body
