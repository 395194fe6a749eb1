"""GET /sessions/{sid}/calls: one ContextCall per context build, completed by usage."""

from __future__ import annotations

import pytest

from contextsvc.engine.build import ContextParts
from contextsvc.engine.messages import Message, PromptSection, ToolDef
from contextsvc.engine.prompt import CachePlan
from prompting.services.calls import breakpoint_labels
from prompting.services.sections import PromptPlan
from sessions.models import ContextCall
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


def _turn(alice, sid: str, text: str = "hello") -> None:
    r = alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": text}]})
    assert r.status_code in (200, 201), r.content


def test_each_context_get_writes_one_record_with_what_was_sent(alice, make_session):
    s = make_session(id="rec-1")
    r = alice.put(
        "sessions/rec-1/system",
        [{"name": "base", "content": "You are careful.", "kind": "base"}],
    )
    assert r.status_code == 200, r.content
    _turn(alice, "rec-1")
    body = alice.get("sessions/rec-1/context").json()
    calls = alice.get("sessions/rec-1/calls").json()
    assert len(calls["items"]) == 1 and calls["next_cursor"] is None
    call = calls["items"][0]
    assert call["source"] == "api" and call["format"] == "anthropic"
    assert call["through_seq"] == 1 and call["first_seq"] == 1 and call["message_count"] == 1
    assert call["estimated_input"] == body["budget"]["used"]
    assert call["guard_status"] == body["budget"]["guard"]["status"]
    assert [sec["name"] for sec in call["breakdown"]["sections"]] == ["base"]
    assert call["breakdown"]["sections"][0]["tokens"] > 0
    assert call["breakdown"]["largest"][0]["seq"] == 1
    # Not reported yet.
    assert call["completed_at"] is None and call["reported_input"] is None
    assert s["id"] == "rec-1"


def test_usage_completes_the_record_with_cost_in_the_models_prices(alice, make_session):
    make_session(id="rec-2")  # claude-sonnet-4-5: $3 input / $15 output / $0.30 read / $3.75 write
    _turn(alice, "rec-2")
    alice.get("sessions/rec-2/context")
    r = alice.post(
        "sessions/rec-2/usage",
        {
            "input_tokens": 1_000,
            "output_tokens": 100,
            "cache_read_tokens": 10_000,
            "cache_creation_tokens": 2_000,
        },
    )
    assert r.status_code == 200, r.content
    call = alice.get("sessions/rec-2/calls").json()["items"][0]
    assert call["reported_input"] == 1_000 and call["reported_total_input"] == 13_000
    assert call["cache_read"] == 10_000 and call["cache_write"] == 2_000
    expected = (1_000 * 3 + 2_000 * 3.75 + 10_000 * 0.3 + 100 * 15) / 1e6
    assert call["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert call["cost_without_cache_usd"] == pytest.approx((13_000 * 3 + 100 * 15) / 1e6)
    assert call["saved_usd"] == pytest.approx(call["cost_without_cache_usd"] - expected, abs=1e-6)
    assert call["latency_ms"] is not None and call["latency_ms"] >= 0
    # A second report without a new build has no open record to complete.
    alice.post("sessions/rec-2/usage", {"input_tokens": 5, "output_tokens": 5})
    again = alice.get("sessions/rec-2/calls").json()["items"][0]
    assert again["reported_input"] == 1_000


def test_usage_without_any_build_changes_no_record(alice, make_session):
    make_session(id="rec-3")
    _turn(alice, "rec-3")
    assert alice.post("sessions/rec-3/usage", {"input_tokens": 10}).status_code == 200
    assert alice.get("sessions/rec-3/calls").json() == {"items": [], "next_cursor": None}


def test_calls_are_cursor_paginated_newest_first(alice, make_session):
    make_session(id="rec-4")
    for i in range(5):
        _turn(alice, "rec-4", f"q{i}")
        alice.get("sessions/rec-4/context")
    first = alice.get("sessions/rec-4/calls", limit=2).json()
    assert [c["through_seq"] for c in first["items"]] == [5, 4]
    second = alice.get("sessions/rec-4/calls", limit=2, cursor=first["next_cursor"]).json()
    assert [c["through_seq"] for c in second["items"]] == [3, 2]
    third = alice.get("sessions/rec-4/calls", limit=2, cursor=second["next_cursor"]).json()
    assert [c["through_seq"] for c in third["items"]] == [1] and third["next_cursor"] is None


def test_calls_of_another_key_are_404_and_bad_input_is_422(alice, bob, anon, make_session):
    make_session(id="rec-5")
    assert bob.get("sessions/rec-5/calls").status_code == 404
    assert anon.get("sessions/rec-5/calls").status_code == 401
    r = alice.get("sessions/rec-5/calls", limit=0)
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR"
    assert alice.get("sessions/rec-5/calls", cursor="x").status_code == 422


def test_tool_breakdown_counts_placeholders_and_tools_per_server(alice, make_session):
    # The insertion cap off (view_share 1): these outputs are to be trimmed, not cut.
    cache = {"context_budget_tokens": 1_000, "view_share": 1}
    make_session(id="rec-6", policy={"tool_output_cache": cache})
    tools = [
        {"name": "bash", "description": "Run a command", "input_schema": {"type": "object"}},
        {
            "name": "mcp__github__create_issue",
            "description": "Open an issue",
            "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}},
            "category": "mcp",
        },
    ]
    assert alice.put("sessions/rec-6/tools", tools).status_code == 200
    _turn(alice, "rec-6", "go")
    for i in range(4):
        output = "\n".join(f"line {j} of output {i} " + "x" * 40 for j in range(60))
        r = alice.post("sessions/rec-6/messages", {"messages": tool_turn(f"c{i}", output)})
        assert r.status_code in (200, 201), r.content
    alice.get("sessions/rec-6/context")
    call = ContextCall.objects.get(session__external_id="rec-6")
    servers = call.breakdown["tools"]["servers"]
    assert "mcp:github" in servers and len(servers) >= 2  # bash under its category
    assert servers["mcp:github"]["sent"] > 0
    placeholders = call.breakdown["placeholders"]
    assert placeholders["count"] >= 1
    assert placeholders["by_state"]["trimmed"]["count"] == placeholders["count"]
    assert call.components["outputs"] == call.breakdown["outputs_tokens"] > 0


@pytest.mark.django_db(False)
def test_breakpoint_labels_follow_the_cache_order_of_their_prefixes():
    """docs/concepts/caching.md#breakpoints: prefix_tokens run tools → system… → history; labels
    must too."""
    parts = ContextParts(
        model="m",
        max_output_tokens=10,
        sections=[PromptSection("base", "a"), PromptSection("rules", "b")],
        messages=[Message(role="user", content="hi", seq=7, token_count=3)],
        tools=[ToolDef("read"), ToolDef("write")],
    )
    plan = PromptPlan(
        sections=parts.sections,
        cache=CachePlan(tools=True, system=(1,), history=True, prefix_tokens=(100, 300, 500)),
    )
    sections = [{"name": "base"}, {"name": "rules"}]
    assert breakpoint_labels(parts, plan, sections) == [
        {"label": "tools (last: write)", "prefix_tokens": 100},
        {"label": "system · rules", "prefix_tokens": 300},
        {"label": "history (through #7)", "prefix_tokens": 500},
    ]
