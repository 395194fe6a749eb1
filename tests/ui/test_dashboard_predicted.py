"""Compaction in the inspector: the preview kept beside the result
(predicted vs actual, while the run is queued and after it ends), facts at risk grouped
(retrievable by ref vs gone), and the summariser and model that really wrote the summary."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from compaction.dashboard.predictions import fact_groups, summary_credit
from compaction.models import CompactionRun
from compaction.services.execute import compaction_execute
from sessions.dashboard.charts import short
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


@pytest.fixture
def big(make_dash_session):
    return make_dash_session(turns=6, calls_per_turn=2, tool_lines=300)


def _rows(html: str) -> dict[str, tuple[str, str]]:
    rows = re.findall(
        r'<tr[^>]*data-row="([^"]+)"><th scope="row">[^<]*</th><td class="num">([^<]*)</td><td class="num">([^<]*)</td>',
        html,
    )
    return {label: (pred, act) for label, pred, act in rows}


def test_predicted_vs_actual_from_queue_to_result(op, big):
    preview = op.get(
        reverse("dashboard:compact_preview", args=[big.pk]),
        {"strategy": "chain", "retain_last_turns": 1},
        headers=HX,
    ).content.decode()
    predicted_after = re.search(r'<span class="big">[^→]+→ ([^<]+)</span>', preview).group(1)

    body = op.post(
        reverse("dashboard:compact_start", args=[big.pk]),
        {"strategy": "chain", "retain_last_turns": 1},
        headers=HX,
    ).content.decode()
    run = CompactionRun.objects.get(session=big)
    assert run.prediction and run.prediction["changed"] is True
    assert run.prediction["summarizer"] == "offline" and run.prediction["summary_model"] == ""
    queued = _rows(body)
    assert queued["Tokens after"][1] == "…"  # the prediction is there before the run starts
    assert queued["Tokens after"][0] == f"{run.prediction['after_tokens']:,}"
    # The preview's short form (e.g. 12.3k, or 379 under a thousand) and the
    # stored prediction agree.
    assert predicted_after == short(run.prediction["after_tokens"])

    compaction_execute(run_id=run.pk)
    run.refresh_from_db()
    url = reverse("dashboard:compaction_status", args=[big.pk, run.pk])
    done = op.get(url, headers=HX).content.decode()
    rows = _rows(done)
    assert rows["Tokens after"] == (
        f"{run.prediction['after_tokens']:,}",
        f"{run.after_tokens:,}",
    )
    assert rows["Summary by"][1] == "offline summariser (deterministic, no model)"
    history = op.get(reverse("dashboard:compaction_history", args=[big.pk]), headers=HX)
    assert "Predicted" in history.content.decode() and _rows(history.content.decode())


def test_the_offline_summariser_is_never_shown_as_the_sessions_model(op, big):
    op.post(
        reverse("dashboard:compact_start", args=[big.pk]), {"strategy": "summarize"}, headers=HX
    )
    run = CompactionRun.objects.get(session=big)
    compaction_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.summarizer == "offline" and run.model == "offline"
    html = op.get(
        reverse("dashboard:compaction_history", args=[big.pk]), headers=HX
    ).content.decode()
    card = html[html.index("run-summarizer") :][:300]
    assert "offline summariser (deterministic, no model)" in card
    assert big.model not in card


def test_summary_credit_names_the_remote_summariser_and_its_model():
    assert (
        summary_credit("anthropic", "claude-haiku-4-5") == "anthropic summariser · claude-haiku-4-5"
    )
    assert summary_credit("", "") == "no summary written"
    assert summary_credit("offline", "offline") == "offline summariser (deterministic, no model)"


def test_facts_at_risk_are_grouped_by_what_is_left_of_them():
    groups = fact_groups(
        {
            "lost_count": 4,
            "recoverable": 2,
            "lost": [
                {"kind": "ref", "text": "out_ab12", "seq": 3},
                {"kind": "error", "text": "ERROR timeout", "seq": 4, "from_ref": "out_cd34"},
                {"kind": "request", "text": "fix module 3", "seq": 1},
            ],
        }
    )
    assert [f["text"] for f in groups.by_ref] == ["out_ab12", "ERROR timeout"]
    assert [f["text"] for f in groups.gone] == ["fix module 3"]
    assert groups.recoverable == 2 and groups.unlisted == 1
    assert fact_groups(None) is None


def _session_with_facts(make_dash_session):
    """A first turn full of facts (a request, a path, an error in a stored output), then filler."""
    from sessions.services.append import session_append_messages

    session = make_dash_session(sid="facts", turns=0, usage=False)
    log = "\n".join(f"step {i} ok" for i in range(400)) + "\nKeyError: 'merchant_id' in settle()"
    first = [
        {
            "role": "user",
            "content": "Deploy the payments service; the config is in src/pay/settings.py",
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c0", "name": "bash", "arguments": {"command": "make deploy"}}],
        },
        {"role": "tool", "tool_call_id": "c0", "content": log},
        {"role": "assistant", "content": "It failed."},
    ]
    session_append_messages(session=session, messages=first)
    for t in range(1, 6):
        session_append_messages(
            session=session,
            messages=[
                {"role": "user", "content": f"Now step {t}."},
                {"role": "assistant", "content": f"Done {t}."},
            ],
        )
    session.refresh_from_db()
    return session


def test_preview_lists_the_facts_at_risk_in_their_groups(op, make_dash_session):
    session = _session_with_facts(make_dash_session)
    html = op.get(
        reverse("dashboard:compact_preview", args=[session.pk]),
        {"strategy": "drop_oldest_turns"},
        headers=HX,
    ).content.decode()
    assert "at risk:" in html
    by_ref = html[html.index('class="facts-by-ref"') :].split("</ul>")[0]
    gone = html[html.index('class="facts-gone"') :].split("</ul>")[0]
    assert "KeyError" in by_ref and "out_" in by_ref  # the output stays stored
    assert "src/pay/settings.py" in gone and "Deploy the payments service" in gone


def test_a_run_without_a_preview_shows_no_prediction(op, big):
    from compaction.services.requests import compaction_request

    run, _ = compaction_request(
        session=big, trigger="manual", reason={"kind": "manual"}, enqueue=False
    )
    compaction_execute(run_id=run.pk)
    html = op.get(
        reverse("dashboard:compaction_history", args=[big.pk]), headers=HX
    ).content.decode()
    assert "Predicted" not in html and "summary: " in html
