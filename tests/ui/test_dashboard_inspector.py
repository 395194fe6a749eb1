"""The session inspector: budget, usage chart, timeline, built context, and a
query count that does not depend on the session's size."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions.dashboard.selectors.detail import budget_view
from sessions.dashboard.selectors.timeline import timeline_page
from sessions.dashboard.selectors.usage import PER_CALL_BELOW, usage_over_turns
from sessions.models import Message
from tests.ui.conftest import HX, build_session

pytestmark = pytest.mark.django_db


def detail(session) -> str:
    return reverse("dashboard:session_detail", args=[session.pk])


# --- budget ---------------------------------------------------------------------------


def test_budget_bar_has_every_component_and_both_thresholds(op, make_dash_session):
    session = make_dash_session(turns=2)
    budget = budget_view(session)
    page = op.get(detail(session)).content.decode()
    for key in ("system", "tools", "conversation", "outputs", "free", "buffer", "reserved"):
        assert f'class="seg seg-{key}"' in page, key
    assert "marker-compact" in page and "marker-block" in page and "marker-limit" in page
    # Exact numbers in the table and on hover.
    assert (
        f"{budget.used:,}" in page
        and f"{budget.compact_at:,}" in page
        and f"{budget.block_at:,}" in page
    )
    outputs = next(s for s in budget.segments if s.key == "outputs")
    assert f"Tool outputs&#10;{outputs.tokens:,} tokens" in page


def test_budget_splits_tool_outputs_from_the_conversation(make_dash_session):
    session = make_dash_session(turns=2, calls_per_turn=2)
    budget = budget_view(session)
    seg = {s.key: s.tokens for s in budget.segments}
    tool_tokens = sum(
        Message.objects.filter(session=session, role="tool").values_list("token_count", flat=True)
    )
    assert seg["outputs"] == tool_tokens
    assert seg["conversation"] + seg["outputs"] == session.conversation_tokens
    window = session.context_window
    assert sum(seg.values()) == window  # used + free + buffer + reserved fill the bar
    # thresholds are drawn at their share of the whole window
    assert budget.compact_pct == round(100 * budget.compact_at / window, 2)


def test_budget_shows_estimate_next_to_provider_report(op, make_dash_session):
    session = make_dash_session(turns=1, usage=True)
    page = op.get(detail(session)).content.decode()
    assert "Provider-reported" in page and "Calibrated projection" in page
    unreported = make_dash_session(sid="quiet", turns=1, usage=False)
    assert "No provider usage reported yet" in op.get(detail(unreported)).content.decode()


def test_budget_partial_polls_and_updates_the_header_out_of_band(op, make_dash_session):
    session = make_dash_session(turns=1)
    url = reverse("dashboard:session_budget", args=[session.pk])
    body = op.get(url, {"seen": 1}, headers=HX).content.decode()
    assert body.lstrip().startswith('<section id="budget"')
    assert 'hx-trigger="every 10s' in body and "window-changed from:body" in body
    assert 'id="session-status" class="session-status" hx-swap-oob="true"' in body
    # The timeline showed message 1 only: the others are announced.
    assert f"{session.last_seq - 1} new messages" in body
    assert "new message" not in op.get(url, {"seen": session.last_seq}, headers=HX).content.decode()


# --- usage over turns -------------------------------------------------------------------


def test_usage_chart_has_a_bar_per_turn_and_the_reported_line(op, make_dash_session):
    session = make_dash_session(turns=PER_CALL_BELOW, usage=True)
    series = usage_over_turns(session)
    assert series.unit == "turn"
    assert [b.first_turn for b in series.bars] == list(range(1, PER_CALL_BELOW + 1))
    assert all(b.reported for b in series.bars)
    # context grows turn by turn (nothing compacted)
    totals = [b.total for b in series.bars]
    assert totals == sorted(totals)
    assert totals[-1] == budget_view(session).estimated
    body = op.get(
        reverse("dashboard:session_usage", args=[session.pk]), headers=HX
    ).content.decode()
    assert body.count(" data-used=") == PER_CALL_BELOW and "<polyline" in body


def test_usage_chart_of_a_one_task_agent_run_has_a_bar_per_llm_call(op, make_dash_session):
    """Few user turns (an agent working through one task): a bar per LLM call."""
    session = make_dash_session(turns=2, calls_per_turn=3, usage=True)
    series = usage_over_turns(session)
    assert series.unit == "LLM call"
    # Each turn: 3 tool-calling answers and a final one = 4 calls; the task
    # belongs to the first call's bar.
    assert [b.first_turn for b in series.bars] == list(range(1, 9))
    assert series.bars[0].first_seq == 1
    totals = [b.total for b in series.bars]
    assert totals == sorted(totals) and totals[-1] == budget_view(session).estimated
    body = op.get(
        reverse("dashboard:session_usage", args=[session.pk]), headers=HX
    ).content.decode()
    assert "8 LLM calls" in body


def test_usage_chart_buckets_long_sessions_to_a_readable_width(make_dash_session):
    session = make_dash_session(turns=30, tool_lines=2, usage=False)
    series = usage_over_turns(session, max_bars=10)
    assert len(series.bars) == 10 and series.turns == 30
    assert series.bars[0].first_turn == 1 and series.bars[-1].last_turn == 30


# --- timeline ----------------------------------------------------------------------------


def test_timeline_groups_by_turn_and_pairs_calls_with_results(op, make_dash_session):
    session = make_dash_session(turns=2, calls_per_turn=2)
    page = timeline_page(session)
    assert [t.number for t in page.turns] == [2, 1]  # newest first
    turn = page.turns[-1]
    assistant_steps = [s for s in turn.steps if s.kind == "assistant" and s.calls]
    assert len(assistant_steps) == 2
    for step in assistant_steps:
        (pair,) = step.calls
        assert pair.result is not None and pair.result.tool_call_id == pair.id
    html = op.get(detail(session)).content.decode()
    assert html.count('class="call"') == 4
    assert "Turn 2" in html and "Turn 1" in html


def test_timeline_paginates_by_turns_with_intersect_trigger(op, make_dash_session):
    session = make_dash_session(turns=25, tool_lines=2, usage=False)  # 100 messages
    first = timeline_page(session)
    assert first.before is not None
    # pages end on a turn boundary: the oldest message of the page is a user message
    oldest = first.turns[-1]
    assert not oldest.continued
    html = op.get(detail(session)).content.decode()
    assert f'?before={first.before}" hx-trigger="intersect once"' in html
    seen = {m for t in first.turns for m in range(t.first_seq, t.last_seq + 1)}
    before = first.before
    while before:
        body = op.get(
            reverse("dashboard:session_timeline", args=[session.pk]), {"before": before}, headers=HX
        )
        page = timeline_page(session, before=before)
        assert body.status_code == 200
        for t in page.turns:
            seen.update(range(t.first_seq, t.last_seq + 1))
        before = page.before
    assert seen == set(range(1, session.last_seq + 1))  # every message exactly once, none lost
    last = op.get(
        reverse("dashboard:session_timeline", args=[session.pk]), {"before": 5}, headers=HX
    )
    assert "Start of the session" in last.content.decode()


def test_a_very_long_turn_is_split_without_separating_calls_from_results(make_dash_session):
    session = make_dash_session(
        turns=1, calls_per_turn=40, tool_lines=2, usage=False
    )  # 82 messages
    page = timeline_page(session)
    assert page.turns[0].continued and page.before is not None
    for turn in page.turns:
        for step in turn.steps:
            assert step.kind != "tool"  # no orphaned result at a page edge
    rest = timeline_page(session, before=page.before)
    assert rest.turns[-1].number == 1 and not rest.turns[-1].continued


def test_timeline_badges_and_compacted_messages(op, make_dash_session):
    session = make_dash_session(turns=3)
    Message.objects.filter(session=session, seq=3).update(
        view_state="trimmed", view="[tool output trimmed]"
    )
    session.__class__.objects.filter(pk=session.pk).update(window_start_seq=5)
    session.refresh_from_db()
    html = op.get(detail(session)).content.decode()
    assert 'class="vbadge vbadge-trimmed"' in html
    assert 'class="vbadge vbadge-summarised"' in html
    assert "[tool output trimmed]" in html  # the view the model sees is what is shown


def test_transcript_text_is_escaped_everywhere(op, make_dash_session):
    evil = "<script>alert('x')</script><img src=x onerror=alert(1)>"
    session = make_dash_session(turns=1, user_text=evil)
    pages = [
        op.get(detail(session)),
        op.get(reverse("dashboard:message_full", args=[session.pk, 1]), headers=HX),
        op.get(
            reverse("dashboard:session_context", args=[session.pk]),
            {"format": "anthropic"},
            headers=HX,
        ),
        op.get(
            reverse("dashboard:session_context", args=[session.pk]),
            {"format": "openai"},
            headers=HX,
        ),
    ]
    for response in pages:
        body = response.content.decode()
        assert "<script>alert" not in body and "<img src=x" not in body
        assert "&lt;script&gt;" in body


def test_long_message_preview_and_full_text(op, make_dash_session):
    session = make_dash_session(turns=1, user_text="word " * 2000)
    html = op.get(detail(session)).content.decode()
    assert "Show full message" in html and "more characters" in html
    full = op.get(
        reverse("dashboard:message_full", args=[session.pk, 1]), headers=HX
    ).content.decode()
    assert full.count("word") == 2000


def test_empty_session(op, alice_key):
    from sessions.services.sessions import session_create

    session = session_create(owner=alice_key[0], data={"id": "empty", "model": "gpt-4o"})
    html = op.get(detail(session)).content.decode()
    assert "No messages yet." in html and "No turns yet." in html
    body = op.get(
        reverse("dashboard:compaction_history", args=[session.pk]), headers=HX
    ).content.decode()
    assert "No compaction yet." in body


# --- built context ----------------------------------------------------------------------


def test_context_tabs_show_the_body_the_api_returns(op, alice, make_session):
    sid = make_session(id="ctx")["id"]
    alice.put(
        f"sessions/{sid}/system",
        [
            {
                "name": "base",
                "content": "You are a coding agent. " * 300,
                "kind": "base",
                "cacheable": True,
            },
        ],
    )
    alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "Fix the bug"}]}
    )
    from sessions.models import Session

    session = Session.objects.get(external_id=sid)
    url = reverse("dashboard:session_context", args=[session.pk])
    anthropic = op.get(url, {"format": "anthropic"}, headers=HX).content.decode()
    api_body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    assert "Fix the bug" in anthropic and "claude-sonnet-4-5" in anthropic
    marked = [i for i, b in enumerate(api_body["system"]) if "cache_control" in b]
    if marked:  # where the build places breakpoints, the tab marks the same blocks
        assert "cache breakpoint" in anthropic and f"system[{marked[0]}]" in anthropic
    openai = op.get(url, {"format": "openai"}, headers=HX).content.decode()
    assert "automatically" in openai and "Fix the bug" in openai
    raw = op.get(
        reverse("dashboard:session_context_json", args=[session.pk]), {"format": "anthropic"}
    )
    assert raw["Content-Type"] == "application/json"
    assert raw.json()["messages"] == api_body["messages"]


def test_context_messages_page_from_the_end(op, make_dash_session):
    session = make_dash_session(turns=20, tool_lines=2, usage=False)
    url = reverse("dashboard:session_context", args=[session.pk])
    first = op.get(url, {"format": "openai"}, headers=HX).content.decode()
    assert "Show earlier messages" in first
    shown = re.findall(r"messages\[(\d+)\]", first)
    assert max(map(int, shown)) > 25
    earlier = op.get(url, {"format": "openai", "start": 0}, headers=HX).content.decode()
    assert "messages[1]" in earlier and "Show earlier" not in earlier


# --- query counts -------------------------------------------------------------------------


def _queries(client, url, **kw) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **kw)
    assert response.status_code == 200, url
    return len(ctx)


def test_query_count_is_the_same_for_small_and_large_sessions(
    op, alice_key, django_assert_max_num_queries
):
    small = build_session(alice_key[0], sid="small", turns=2, tool_lines=3)
    large = build_session(alice_key[0], sid="large", turns=60, calls_per_turn=2, tool_lines=3)
    assert large.message_count > 10 * small.message_count
    for name, kw in [
        ("session_detail", {}),
        ("session_budget", {"headers": HX}),
        ("session_usage", {"headers": HX}),
        ("session_timeline", {"headers": HX}),
        ("compaction_history", {"headers": HX}),
    ]:
        counts = [
            _queries(op, reverse(f"dashboard:{name}", args=[s.pk]), **kw) for s in (small, large)
        ]
        assert counts[0] == counts[1], (name, counts)
    # 16, plus the calls card (cost, forecast, rows) and the chart's as-sent records (≤ 2).
    with django_assert_max_num_queries(21):
        op.get(reverse("dashboard:session_detail", args=[large.pk]))
    with django_assert_max_num_queries(6):
        op.get(reverse("dashboard:session_timeline", args=[large.pk]), {"before": 60}, headers=HX)
