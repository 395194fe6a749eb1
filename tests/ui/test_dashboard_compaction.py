"""Manual compaction from the inspector, through the compaction services: preview,
submit, queued → running → done polling that stops with 286, failure that
changes nothing, history with retention, snapshots, restore."""

from __future__ import annotations

import pytest
from django.urls import reverse

from compaction.models import CompactionRun, Snapshot
from compaction.services.execute import compaction_execute
from compaction.services.requests import compaction_request
from contextsvc.engine.summarize import SummarizerError
from fakes.openai_server import FakeOpenAI
from sessions.dashboard.selectors.detail import budget_view
from sessions.dashboard.selectors.usage import usage_over_turns
from sessions.models import Session
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


class BrokenSummarizer:
    name = "broken"

    def complete(self, request):
        raise SummarizerError("the summary model answered 400: bad request", transient=False)


@pytest.fixture
def big(make_dash_session):
    return make_dash_session(turns=6, calls_per_turn=2, tool_lines=300)


def _status_url(session, run) -> str:
    return reverse("dashboard:compaction_status", args=[session.pk, run.pk])


def test_inspector_offers_the_compact_form(op, big):
    html = op.get(reverse("dashboard:session_detail", args=[big.pk])).content.decode()
    assert 'id="compact-form"' in html
    for value in ("chain", "sandwich", "tool_clearing", "summarize", "drop_oldest_turns"):
        assert f'<option value="{value}"' in html
    assert 'name="instructions"' in html and 'name="retain_last_turns"' in html
    assert 'id="compact-status"' not in html  # nothing under way


def test_preview_shows_what_would_go_and_writes_nothing(op, big):
    before = Session.objects.values().get(pk=big.pk)
    url = reverse("dashboard:compact_preview", args=[big.pk])
    body = op.get(url, {"strategy": "chain", "retain_last_turns": 1}, headers=HX).content.decode()
    assert "Preview" in body and "→" in body and "Leave the window" in body
    assert "Keep: #" in body
    assert CompactionRun.objects.count() == 0 and Snapshot.objects.count() == 0
    assert Session.objects.values().get(pk=big.pk) == before
    bad = op.get(url, {"strategy": "bogus"}, headers=HX).content.decode()
    assert "alert-error" in bad


def test_submit_queues_a_run_and_polls_until_it_finishes(op, big):
    url = reverse("dashboard:compact_start", args=[big.pk])
    body = op.post(
        url,
        {"strategy": "chain", "instructions": "keep file paths", "retain_last_turns": 1},
        headers=HX,
    ).content.decode()
    run = CompactionRun.objects.get(session=big)
    assert (
        run.status == "queued" and run.trigger == "manual" and run.instructions == "keep file paths"
    )
    assert f'hx-get="{_status_url(big, run)}" hx-trigger="every 1s"' in body
    assert "Waiting for a worker" in body

    polling = op.get(_status_url(big, run), headers=HX)
    assert polling.status_code == 200 and "HX-Trigger" not in polling

    compaction_execute(run_id=run.pk)  # what the Celery task does
    done = op.get(_status_url(big, run), headers=HX)
    assert done.status_code == 286  # htmx stops polling
    assert "window-changed" in done["HX-Trigger"] and "compaction-finished" in done["HX-Trigger"]
    text = done.content.decode()
    run.refresh_from_db()
    assert f"{run.before_tokens:,} → {run.after_tokens:,} tokens" in text
    big.refresh_from_db()
    assert big.window_start_seq > 1


def test_a_second_submit_joins_the_run_under_way(op, big):
    url = reverse("dashboard:compact_start", args=[big.pk])
    op.post(url, {"strategy": "chain"}, headers=HX)
    body = op.post(url, {"strategy": "summarize"}, headers=HX).content.decode()
    assert CompactionRun.objects.filter(session=big).count() == 1
    assert "already under way" in body


def test_reload_during_a_run_keeps_following_it(op, big):
    op.post(reverse("dashboard:compact_start", args=[big.pk]), {"strategy": "chain"}, headers=HX)
    run = CompactionRun.objects.get(session=big)
    html = op.get(reverse("dashboard:session_detail", args=[big.pk])).content.decode()
    assert f'hx-get="{_status_url(big, run)}" hx-trigger="every 1s"' in html


def test_failure_shows_the_error_and_that_nothing_changed(op, big):
    before = Session.objects.values().get(pk=big.pk)
    op.post(
        reverse("dashboard:compact_start", args=[big.pk]), {"strategy": "summarize"}, headers=HX
    )
    run = CompactionRun.objects.get(session=big)
    compaction_execute(run_id=run.pk, summarizer=BrokenSummarizer())
    done = op.get(_status_url(big, run), headers=HX)
    assert done.status_code == 286
    assert "window-changed" not in done.get("HX-Trigger", "")
    text = done.content.decode()
    assert "Failed" in text and "bad request" in text and "Nothing changed" in text
    after = Session.objects.values().get(pk=big.pk)
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"
    }


def test_invalid_form_is_shown_with_its_errors(op, big):
    body = op.post(
        reverse("dashboard:compact_start", args=[big.pk]),
        {"strategy": "chain", "retain_last_turns": -1},
        headers=HX,
    ).content.decode()
    assert "field-error" in body and CompactionRun.objects.count() == 0


def test_empty_session_cannot_be_compacted(op, alice_key):
    from sessions.services.sessions import session_create

    session = session_create(owner=alice_key[0], data={"id": "e", "model": "gpt-4o"})
    body = op.post(
        reverse("dashboard:compact_start", args=[session.pk]), {"strategy": "chain"}, headers=HX
    ).content.decode()
    assert "Conversation has no messages" in body


def _compacted(op, session) -> CompactionRun:
    op.post(
        reverse("dashboard:compact_start", args=[session.pk]), {"strategy": "chain"}, headers=HX
    )
    run = CompactionRun.objects.filter(session=session).order_by("-created_at").first()
    return compaction_execute(run_id=run.pk)


def test_history_lists_runs_with_retention_and_snapshot_actions(op, big):
    run = _compacted(op, big)
    assert run.changed and run.snapshot
    body = op.get(
        reverse("dashboard:compaction_history", args=[big.pk]), headers=HX
    ).content.decode()
    assert "badge-succeeded" in body and "manual" in body
    assert f"{run.before_tokens:,} → {run.after_tokens:,}" in body
    assert "retention" in body and f"{run.retention_score:.2f}" in body
    assert "live window" in body  # the newest snapshot is the live one: no restore button for it
    assert 'hx-trigger="compaction-finished from:body"' in body


def test_snapshot_before_after(op, big):
    run = _compacted(op, big)
    snap = run.snapshot
    body = op.get(
        reverse("dashboard:snapshot_detail", args=[big.pk, snap.pk]), headers=HX
    ).content.decode()
    assert "Before" in body and "After" in body
    assert f"window from #{snap.window_start_seq}" in body
    assert "Left the window: <strong>#1–" in body
    if snap.summary:
        assert "Summary" in body


def test_restore_an_earlier_snapshot_and_the_uncompacted_transcript(op, big):
    from sessions.services.append import session_append_messages

    first = _compacted(op, big)
    # More conversation, then a second compaction: the first snapshot is no longer live.
    session_append_messages(
        session=big,
        messages=[{"role": "user", "content": f"More work {i}. " * 50} for i in range(1)]
        + [{"role": "assistant", "content": "Done. " * 200}],
    )
    second = _compacted(op, big)
    assert second.snapshot.pk != first.snapshot.pk
    history = op.get(
        reverse("dashboard:compaction_history", args=[big.pk]), headers=HX
    ).content.decode()
    restore_url = reverse("dashboard:snapshot_restore", args=[big.pk, first.snapshot.pk])
    assert f'hx-post="{restore_url}"' in history and "hx-confirm=" in history

    response = op.post(restore_url, headers=HX)
    assert response.status_code == 200 and "window-changed" in response["HX-Trigger"]
    assert "Restored snapshot" in response.content.decode()
    big.refresh_from_db()
    assert big.window_start_seq == first.snapshot.window_start_seq

    response = op.post(reverse("dashboard:snapshot_restore_uncompacted", args=[big.pk]), headers=HX)
    assert "Restored the uncompacted transcript" in response.content.decode()
    big.refresh_from_db()
    assert big.window_start_seq == 1 and big.live_message_count == big.message_count
    chart = op.get(reverse("dashboard:session_usage", args=[big.pk]), headers=HX).content.decode()
    assert 'class="mark-restore"' in chart and "Restore</li>" in chart


def test_usage_chart_marks_compactions(op, big):
    _compacted(op, big)
    body = op.get(reverse("dashboard:session_usage", args=[big.pk]), headers=HX).content.decode()
    assert 'class="mark-compaction"' in body
    assert "bar-now" in body  # compacted after the last message: the window as it is now


def test_usage_bars_keep_each_turns_peak_and_show_the_window_now(big):
    before = usage_over_turns(big)
    last_before = before.bars[-1].total
    run, _ = compaction_request(
        session=big, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    op_run = compaction_execute(run_id=run.pk)
    assert op_run.changed
    big.refresh_from_db()
    after = usage_over_turns(big)
    assert after.bars[-2].total == last_before  # the last turn still shows how full it got
    assert after.bars[-1].now and after.bars[-1].total < last_before
    assert after.bars[-1].total == budget_view(big).estimated  # "now" is the budget bar


def test_run_card_names_the_summariser_and_model_that_wrote_the_summary(op, big, settings):
    with FakeOpenAI(api_key="k") as fake:
        settings.CONTEXTSVC_SUMMARIZER = "openai"
        settings.CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY = "k"
        settings.CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL = f"{fake.base_url}/v1"
        settings.CONTEXTSVC_SUMMARIZER_OPENAI_MODEL = "gpt-fake-small"
        preview = op.get(
            reverse("dashboard:compact_preview", args=[big.pk]),
            {"strategy": "summarize", "retain_last_turns": 1},
            headers=HX,
        ).content.decode()
        assert "the run asks gpt-fake-small (openai summariser)" in preview
        op.post(
            reverse("dashboard:compact_start", args=[big.pk]),
            {"strategy": "summarize"},
            headers=HX,
        )
        run = compaction_execute(run_id=CompactionRun.objects.get(session=big).pk)
        assert [r.status for r in fake.chat_requests()] == [200]
    assert (run.status, run.summarizer, run.model) == ("succeeded", "openai", "gpt-fake-small")
    body = op.get(
        reverse("dashboard:compaction_history", args=[big.pk]), headers=HX
    ).content.decode()
    assert "summary: openai summariser · gpt-fake-small" in body

    settings.CONTEXTSVC_SUMMARIZER = "offline"
    op.post(reverse("dashboard:compact_start", args=[big.pk]), {"strategy": "sandwich"}, headers=HX)
    offline = compaction_execute(
        run_id=CompactionRun.objects.filter(session=big).order_by("-created_at")[0].pk
    )
    assert (offline.summarizer, offline.model) == ("offline", "offline")
    body = op.get(
        reverse("dashboard:compaction_history", args=[big.pk]), headers=HX
    ).content.decode()
    assert body.count("summary: openai summariser · gpt-fake-small") == 1
    # The offline summariser is named as such, never credited with a model.
    assert "summary: offline summariser (deterministic, no model)</span>" in body
