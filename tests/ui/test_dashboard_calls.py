"""The inspector's calls & cost card, "what was sent at turn N", placeholders that
explain themselves, the list's cost/trend columns and warning colour, cost per day."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from prompting.context.service import context_for_call
from sessions.dashboard.selectors.calls import meter_level
from sessions.dashboard.selectors.usage import PER_CALL_BELOW, usage_over_turns
from sessions.models import ContextCall, Message, Session
from sessions.services.usage import session_record_usage
from sessions.templatetags.figures import FIGURES, WHY
from tests.conftest import tool_turn
from tests.ui.conftest import HX

pytestmark = pytest.mark.django_db


def _calls_urls(session: Session, call_id: int = 1) -> list[str]:
    return [
        reverse("dashboard:session_calls", args=[session.pk]),
        reverse("dashboard:session_call", args=[session.pk, call_id]),
        reverse("dashboard:session_call_at", args=[session.pk]) + "?seq=1",
        reverse("dashboard:cost_overview"),
    ]


def test_calls_pages_need_a_logged_in_operator(visitor, make_dash_session):
    session = make_dash_session(turns=1, builds=True)
    call = ContextCall.objects.get(session=session)
    for url in _calls_urls(session, call.pk):
        response = Client().get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url
        assert visitor.get(url).status_code == 403, url


def test_calls_pages_are_read_only(op, make_dash_session):
    session = make_dash_session(turns=1, builds=True)
    call = ContextCall.objects.get(session=session)
    for url in _calls_urls(session, call.pk):
        assert op.post(url).status_code == 405, url


def test_unknown_session_or_another_sessions_call_is_404(op, make_dash_session):
    mine = make_dash_session(sid="mine", turns=1, builds=True)
    other = make_dash_session(sid="other", turns=1, builds=True)
    theirs = ContextCall.objects.get(session=other)
    assert op.get(reverse("dashboard:session_calls", args=[999_999])).status_code == 404
    # A call id of another session is not reachable through this session's URL.
    url = reverse("dashboard:session_call", args=[mine.pk, theirs.pk])
    assert op.get(url, headers=HX).status_code == 404


def test_empty_states(op, make_dash_session):
    session = make_dash_session(turns=1, usage=False)
    body = op.get(reverse("dashboard:session_calls", args=[session.pk]), headers=HX).content
    assert b"No calls recorded yet." in body
    at = reverse("dashboard:session_call_at", args=[session.pk])
    assert b"No context build was recorded" in op.get(at, {"seq": 1}, headers=HX).content
    assert b"Give a seq or a turn" in op.get(at, headers=HX).content
    assert b"No priced calls in this period." in op.get(reverse("dashboard:cost_overview")).content


def test_operator_reads_the_cost_of_a_session(op, make_dash_session):
    session = make_dash_session(turns=3, builds=True, usage=True)
    calls = list(ContextCall.objects.filter(session=session).order_by("id"))
    assert len(calls) == 3 and all(c.completed_at for c in calls)
    total = sum(c.cost_usd for c in calls)
    page = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    assert 'id="calls"' in page and "Calls &amp; cost" in page
    cost = re.search(r'class="cost-total">([^<]+)<', page).group(1)
    assert cost == f"${total:.4f}"
    assert 'data-testid="forecast"' in page and "call" in page
    # Each row opens what was sent in that call.
    detail = op.get(
        reverse("dashboard:session_call", args=[session.pk, calls[0].pk]), headers=HX
    ).content.decode()
    assert f"Call #{calls[0].pk} · what was sent" in detail
    assert f'data-testid="call-used">{calls[0].estimated_input:,}<' in detail
    assert "AGENT.md" in detail and "base" in detail  # sections by name
    assert "Why these differ" in detail  # used beside provider-reported


def test_what_was_sent_at_turn_n(op, make_dash_session):
    session = make_dash_session(turns=3, builds=True)
    calls = list(ContextCall.objects.filter(session=session).order_by("id"))
    at = reverse("dashboard:session_call_at", args=[session.pk])
    body = op.get(at, {"turn": 2}, headers=HX).content.decode()
    assert f"Call #{calls[1].pk} · what was sent" in body
    body = op.get(at, {"seq": calls[0].through_seq}, headers=HX).content.decode()
    assert f"Call #{calls[0].pk} · what was sent" in body


def test_calls_table_pages_with_a_cursor(op, make_dash_session):
    session = make_dash_session(turns=2, builds=True)
    for _ in range(25):
        context_for_call(session=session, fmt="anthropic", preflight=False)
    url = reverse("dashboard:session_calls", args=[session.pk])
    first = op.get(url, headers=HX).content.decode()
    assert first.count('hx-target="#call-detail" title=') == 20 and "Older calls" in first
    oldest_shown = min(int(n) for n in re.findall(r">#(\d+)</button>", first))
    rest = op.get(url, {"before": oldest_shown}, headers=HX).content.decode()
    assert rest.count('hx-target="#call-detail" title=') == 7 and "Older calls" not in rest


def test_chart_value_at_a_past_turn_is_what_was_sent_then_even_after_trimming(
    op, alice, make_session
):
    """The issue's case: turns rebuilt from today's (trimmed) rows understate the past."""
    s = make_session(id="hist", policy={"tool_output_cache": {"context_budget_tokens": 2_000}})
    session = Session.objects.get(pk=Session.objects.get(external_id="hist").pk)
    output = "\n".join(f"row {j}: " + "value " * 12 for j in range(60))
    sent: dict[int, tuple[int, int]] = {}  # turn -> (call id, used as sent)
    for turn in range(1, PER_CALL_BELOW + 2):
        batch = [{"role": "user", "content": f"step {turn}"}, *tool_turn(f"c{turn}", output)]
        assert alice.post("sessions/hist/messages", {"messages": batch}).status_code in (200, 201)
        body = alice.get("sessions/hist/context").json()
        call = ContextCall.objects.filter(session=session).latest("id")
        assert call.estimated_input == body["budget"]["used"]
        sent[turn] = (call.pk, call.estimated_input)
        alice.post("sessions/hist/messages", {"messages": [{"role": "assistant", "content": "ok"}]})
    first_output = Message.objects.get(session=session, seq=3)
    assert first_output.view_state == "trimmed"  # later turns trimmed turn 1's output
    assert first_output.trim_info["reason"] == "budget"
    assert first_output.trim_info["tokens_before"] > first_output.token_count
    series = usage_over_turns(session)
    assert series.unit == "turn" and series.recorded == len(sent)
    for bar in series.bars:
        call_id, used = sent[bar.first_turn]
        assert bar.call_id == call_id and bar.total == used, bar.label
    # Recomputed from today's rows, turn 1 would now be smaller than what was sent.
    assert first_output.token_count < first_output.trim_info["tokens_before"]
    html = op.get(reverse("dashboard:session_usage", args=[session.pk]), headers=HX).content
    assert f'data-used="{sent[1][1]}" data-call="{sent[1][0]}"'.encode() in html
    # A click on that bar opens what was sent then.
    opens = reverse("dashboard:session_call", args=[session.pk, sent[1][0]])
    assert f'hx-get="{opens}" hx-target="#call-detail"'.encode() in html
    assert s["id"] == "hist"


def test_a_trimmed_placeholder_explains_itself(op, alice, make_session):
    make_session(id="why", policy={"tool_output_cache": {"context_budget_tokens": 2_000}})
    output = "\n".join(f"row {j}: " + "value " * 12 for j in range(60))
    for turn in range(4):
        batch = [{"role": "user", "content": f"step {turn}"}, *tool_turn(f"c{turn}", output)]
        alice.post("sessions/why/messages", {"messages": batch})
    session = Session.objects.get(external_id="why")
    msg = Message.objects.get(session=session, seq=3)
    assert msg.view_state == "trimmed"
    url = reverse("dashboard:output_view", args=[session.pk, msg.output_ref])
    body = op.get(url, {"m": 3}, headers=HX).content.decode()
    assert 'data-testid="placeholder-why"' in body
    assert "#3 is trimmed in context." in body and "60 lines" in body
    assert f"{msg.trim_info['tokens_before']:,} tokens" in body
    assert "Why: budget" in body and "UTC" in body


def test_the_viewer_marks_the_lines_the_model_saw_in_a_cut_view(op, alice, make_session):
    make_session(id="cut", policy={"tool_output_cache": {"max_message_bytes": 2_000}})
    output = "\n".join(f"line {j} " + "y" * 60 for j in range(1, 201))
    alice.post("sessions/cut/messages", {"messages": [{"role": "user", "content": "go"}]})
    alice.post("sessions/cut/messages", {"messages": tool_turn("c1", output)})
    session = Session.objects.get(external_id="cut")
    msg = Message.objects.get(session=session, role="tool")
    assert msg.view_state == "cut"
    shown = int(re.search(r"showing lines 1-([\d,]+) of", msg.view).group(1))
    url = reverse("dashboard:output_view", args=[session.pk, msg.output_ref])
    body = op.get(url, {"m": msg.seq}, headers=HX).content.decode()
    assert f"The model saw lines 1–{shown}" in body
    seen = re.findall(r'class="ol-row is-seen" id="L\d+-(\d+)"', body)
    unseen = re.findall(r'class="ol-row is-unseen" id="L\d+-(\d+)"', body)
    assert [int(n) for n in seen] == list(range(1, shown + 1))
    assert unseen and int(unseen[0]) == shown + 1


def test_list_shows_cost_and_trend_and_warns_before_the_compaction_threshold(op, make_dash_session):
    session = make_dash_session(turns=3, builds=True)
    page = op.get(reverse("dashboard:session_list")).content.decode()
    total = sum(c.cost_usd for c in ContextCall.objects.filter(session=session))
    assert f"${total:.4f}" in page and "3 calls" in page and "/call" in page
    # 86.8 % of usable with compaction at 95 %: not green "ok".
    assert meter_level(session, "ok", 86.8) == "warn"
    assert meter_level(session, "ok", 40.0) == "ok"
    assert meter_level(session, "compact", 96.0) == "compact"
    session.policy = {"thresholds": {"compact_at": 0.8, "block_at": 0.9}}
    assert meter_level(session, "ok", 72.0) == "warn"


def test_cost_per_day_across_sessions(op, make_dash_session):
    make_dash_session(sid="a", turns=2, builds=True)
    make_dash_session(sid="b", turns=1, builds=True)
    calls = ContextCall.objects.all()
    total = sum(c.cost_usd for c in calls)
    page = op.get(reverse("dashboard:cost_overview")).content.decode()
    assert "Cost per day" in page and f"${total:.4f}" in page
    partial = op.get(reverse("dashboard:cost_overview"), headers=HX).content.decode()
    assert partial.lstrip().startswith('<section id="cost-by-day"')


def test_usage_report_completes_the_proxy_style_record_once(make_dash_session):
    session = make_dash_session(turns=1, builds=True, usage=False)
    session_record_usage(session=session, usage={"input_tokens": 100, "output_tokens": 10})
    session_record_usage(session=session, usage={"input_tokens": 999, "output_tokens": 10})
    call = ContextCall.objects.get(session=session)
    assert call.reported_input == 100 and call.cost_usd == pytest.approx((100 * 3 + 10 * 15) / 1e6)


def test_context_tab_names_each_block_with_its_tokens_and_labels_breakpoints_in_order(
    op, alice, make_session
):
    make_session(id="tab", policy={"tool_output_cache": {"context_budget_tokens": 2_000}})
    alice.put(
        "sessions/tab/system",
        [
            {"name": "base", "content": "You are a coding agent. " * 300, "kind": "base"},
            {"name": "AGENT.md", "content": "Run the tests. " * 200, "kind": "rules"},
        ],
    )
    tools = [
        {
            "name": f"mcp__repo__tool{i}",
            "description": "Read a file " * 200,
            "input_schema": {"type": "object"},
        }
        for i in range(3)
    ]
    alice.put("sessions/tab/tools", tools)
    output = "\n".join(f"row {j}: " + "value " * 12 for j in range(60))
    for turn in range(4):
        batch = [{"role": "user", "content": f"step {turn}"}, *tool_turn(f"c{turn}", output)]
        alice.post("sessions/tab/messages", {"messages": batch})
    session = Session.objects.get(external_id="tab")
    body = op.get(
        reverse("dashboard:session_context", args=[session.pk]), {"format": "anthropic"}, headers=HX
    ).content.decode()
    # Section names and their tokens, as a recorded call would keep them.
    alice.get("sessions/tab/context")
    call = ContextCall.objects.get(session=session)
    for i, section in enumerate(call.breakdown["sections"]):
        assert re.search(
            rf"system\[{i}\] · {re.escape(section['name'])}</span>"
            rf'<span class="ctx-tokens"[^>]*>{section["tokens"]:,} tok',
            body,
        ), section
    for tool in call.breakdown["tools"]["sent"]:
        assert f'{tool["name"]}</span> <span class="ctx-tokens">{tool["tokens"]:,} tok' in body
    # Breakpoints in cache order, each with its own prefix: prefixes only grow.
    labels = re.findall(r'<li data-testid="breakpoint">([^<]+)</li>', body)
    assert labels and labels[0].startswith(("tools (last: ", "system · "))
    assert labels[-1].startswith("history (through #")
    prefixes = [
        int(re.search(r"prefix ([\d,]+) tokens", lb).group(1).replace(",", "")) for lb in labels
    ]
    assert prefixes == sorted(prefixes) and len(set(prefixes)) == len(prefixes)
    assert [bp["label"] for bp in call.breakpoints] == [lb.split(" — ")[0] for lb in labels]
    # Placeholders counted as one line with their total.
    placeholders = call.breakdown["placeholders"]
    assert placeholders["count"] >= 1
    assert (
        f"{placeholders['count']} placeholder{'s' if placeholders['count'] > 1 else ''} = "
        f"{placeholders['tokens']:,} tokens" in body
    )


def test_one_vocabulary_of_figures_each_labelled_with_why_they_differ(op, make_dash_session):
    session = make_dash_session(turns=2, builds=True, usage=True)
    page = op.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    for name in ("used", "estimated", "usable", "projected", "provider-reported"):
        assert f'data-figure="{name}" title="{escape(FIGURES[name])}"' in page, name
    assert escape(WHY[frozenset({"used", "provider-reported"})]) in page
    listing = op.get(reverse("dashboard:session_list")).content.decode()
    assert 'data-figure="used"' in listing and 'data-figure="usable"' in listing
    tab = op.get(
        reverse("dashboard:session_context", args=[session.pk]), {"format": "anthropic"}, headers=HX
    ).content.decode()
    assert (
        'data-figure="as sent"' in tab and escape(WHY[frozenset({"estimated", "as sent"})]) in tab
    )
    preview = op.get(reverse("dashboard:compact_preview", args=[session.pk]), headers=HX)
    if b"tokens, " in preview.content:
        assert b'data-figure="history-only"' in preview.content


def test_each_bar_draws_the_call_that_its_answer_came_from(op, make_dash_session):
    """The request built after message T is answered by T + 1: an LLM-call bar
    (which starts at its answer) draws the build made just before it."""
    session = make_dash_session(turns=3, builds=True, usage=False)
    calls = list(ContextCall.objects.filter(session=session).order_by("id"))
    series = usage_over_turns(session)
    assert series.unit == "LLM call"
    drawn = {b.call_id: b for b in series.bars if b.call_id is not None}
    assert set(drawn) == {c.pk for c in calls}
    for call in calls:
        bar = drawn[call.pk]
        assert bar.first_seq <= call.through_seq + 1 <= bar.last_seq
        assert bar.total == call.estimated_input


def test_each_tool_of_a_call_shows_its_mcp_server_or_its_category(op, alice, make_session):
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    make_session(id="sources")
    tools = [
        {"name": "Bash", "description": "Run a command", "input_schema": schema,
         "category": "client"},
        {"name": "mcp__github__create_issue", "description": "Open an issue",
         "input_schema": schema},
    ]  # fmt: skip
    assert alice.put("sessions/sources/tools", tools).status_code == 200
    alice.post("sessions/sources/messages", {"messages": [{"role": "user", "content": "go"}]})
    alice.get("sessions/sources/context")
    session = Session.objects.get(external_id="sources")
    call = ContextCall.objects.get(session=session)
    body = op.get(
        reverse("dashboard:session_call", args=[session.pk, call.pk]), headers=HX
    ).content.decode()
    assert ">Source</th>" in body
    assert re.search(r'<th scope="row" class="mono">client</th>', body)
    assert re.search(r'<th scope="row" class="mono">mcp:github</th>', body)
    assert re.search(r'>Bash</th><td class="muted small">client<', body)
