"""Prompt sections, cache breakpoints and cache accounting over the API.

docs/concepts/caching.md#breakpoints, docs/concepts/caching.md#degradation, and the provider
history rebuilt after compaction (docs/concepts/proxy-rules.md#rebuilt-request), and the bad-input
rules.
"""

from __future__ import annotations

import json
import logging

import pytest

from contextsvc.engine.recall import with_search_hint
from prompting.context.build import context_preview
from prompting.models import PromptState
from sessions.models import Message, Session
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

BIG = "You are a careful coding agent. " * 300  # ~1,800 tokens: above the 1,024 minimum
RULES = "Always run the tests before you commit. " * 100
TOOL = {
    "name": "bash",
    "description": "Run a command",
    "category": "builtin",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def markers(body: dict) -> int:
    return json.dumps(body).count('"cache_control"')


@pytest.fixture
def sid(alice, make_session):
    sid = make_session(id="cache")["id"]
    response = alice.put(
        f"sessions/{sid}/system",
        [
            {
                "name": "status",
                "content": "Context: 12% used.",
                "kind": "status",
                "cacheable": False,
            },
            {
                "name": "pad",
                "content": "scratch: look at parser.py",
                "kind": "scratchpad",
                "cacheable": False,
            },
            {"name": "rules", "content": RULES, "kind": "rules"},
            {"name": "base", "content": BIG, "kind": "base"},
        ],
    )
    assert response.status_code == 200, response.content
    assert alice.put(f"sessions/{sid}/tools", [TOOL]).status_code == 200
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {"role": "user", "content": "Fix the failing test"},
                *tool_turn("c1", "FAILED test_x"),
            ]
        },
    )
    return sid


# --- docs/concepts/caching.md#section-order: order and breakpoints --------------------------------


def test_s002_4_anthropic_sections_ordered_with_breakpoints(alice, sid):
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    system = body["system"]
    assert [b["text"] for b in system] == [BIG, RULES, "scratch: look at parser.py"]
    assert "cache_control" not in system[0]
    assert system[1]["cache_control"] == {"type": "ephemeral"}  # after the last cacheable section
    assert "cache_control" not in system[2]
    # The moving breakpoint on the newest history block, then the dynamic status after it.
    last = body["messages"][-1]["content"]
    assert last[0]["type"] == "tool_result" and last[0]["cache_control"] == {"type": "ephemeral"}
    assert last[-1] == {"type": "text", "text": "Context: 12% used."}
    assert markers(body) == 2  # the one small tool is below the minimum: not marked
    plan = body["budget"]["cache"]["last_build"]["breakpoints"]
    assert plan["count"] == 2 and plan["system"] == [1] and plan["history"] is True


def test_s002_4_openai_same_order_without_markers(alice, sid):
    body = alice.get(f"sessions/{sid}/context", format="openai").json()
    assert markers(body) == 0
    msgs = body["messages"]
    assert msgs[0] == {
        "role": "system",
        "content": f"{BIG}\n\n{RULES}\n\nscratch: look at parser.py",
    }
    assert [m["role"] for m in msgs[1:]] == ["user", "assistant", "tool", "system"]
    assert msgs[-1]["content"] == "Context: 12% used."
    assert body["budget"]["cache"]["last_build"]["mode"] == "automatic"


def test_s002_4_never_more_than_4_markers_even_with_everything_cacheable(alice, make_session):
    sid = make_session(id="four")["id"]
    alice.put(
        f"sessions/{sid}/system",
        [
            {"name": "base", "content": BIG, "kind": "base"},
            {"name": "rules", "content": RULES, "kind": "rules"},
            {"name": "mem", "content": BIG, "kind": "memory"},
            {"name": "skill", "content": RULES, "kind": "skill"},
        ],
    )
    big_tool = {**TOOL, "description": "Run a command. " * 400}
    alice.put(f"sessions/{sid}/tools", [big_tool])
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "go"}]})
    body = alice.get(f"sessions/{sid}/context").json()
    assert markers(body) == 4
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [("cache_control" in b) for b in body["system"]] == [False, False, True, True]
    alice.patch(f"sessions/{sid}", {"policy": {"prompt_cache": {"max_breakpoints": 2}}})
    body = alice.get(f"sessions/{sid}/context").json()
    assert markers(body) == 2
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_s002_4_minimum_cacheable_length_comes_from_the_model_profile(alice, make_session):
    # Seeded: claude-haiku-4-5 caches from 4,096 tokens; a dated id matches its family row.
    sid = make_session(id="haiku", model="claude-haiku-4-5-20251001")["id"]
    alice.put(f"sessions/{sid}/system", [{"name": "base", "content": BIG, "kind": "base"}])
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "go"}]})
    body = alice.get(f"sessions/{sid}/context").json()
    assert markers(body) == 0
    assert body["budget"]["cache"]["min_cacheable_tokens"] == 4096
    sid = make_session(id="sonnet")["id"]
    alice.put(f"sessions/{sid}/system", [{"name": "base", "content": BIG, "kind": "base"}])
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "go"}]})
    body = alice.get(f"sessions/{sid}/context").json()
    assert body["budget"]["cache"]["min_cacheable_tokens"] == 1024
    assert markers(body) == 2


def test_s002_4_policy_can_turn_markers_off_or_ask_for_the_1h_ttl(alice, sid):
    alice.patch(f"sessions/{sid}", {"policy": {"prompt_cache": {"ttl": "1h"}}})
    body = alice.get(f"sessions/{sid}/context").json()
    assert body["system"][1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    alice.patch(f"sessions/{sid}", {"policy": {"prompt_cache": {"enabled": False}}})
    body = alice.get(f"sessions/{sid}/context").json()
    assert markers(body) == 0
    assert body["budget"]["cache"]["last_build"]["mode"] == "none"
    response = alice.patch(f"sessions/{sid}", {"policy": {"prompt_cache": {"ttl": "2h"}}})
    assert response.status_code == 422


def test_s002_4_raw_format_reports_the_plan(alice, sid):
    body = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert body["cache_breakpoints"]["count"] == 2
    assert [s["kind"] for s in body["system"]] == ["base", "rules", "scratchpad", "status"]


# --- cache accounting -------------------------------------------------------------------------


def test_cache_accounting_prefix_identical_between_builds(alice, sid):
    first = alice.get(f"sessions/{sid}/context").json()["budget"]["cache"]["last_build"]
    assert first["prefix_identical_tokens"] == 0 and first["cache_read_tokens"] == 0
    assert first["cache_write_tokens"] > 1024
    alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c2", "still failing")})
    second = alice.get(f"sessions/{sid}/context").json()["budget"]["cache"]
    build = second["last_build"]
    # Everything the first build sent before its tail is still the same prefix.
    assert build["prefix_identical_tokens"] == first["cache_write_tokens"]
    assert build["cache_read_tokens"] == first["cache_write_tokens"]
    assert build["cache_write_tokens"] > 0 and build["prefix_changed"] is False
    # claude-sonnet-4-5: $3 / $15 per million, writes 1.25×, reads 0.1×
    assert second["prices"] == {
        "input": 3.0,
        "output": 15.0,
        "cache_write_5m": 3.75,
        "cache_write_1h": 6.0,
        "cache_read": 0.3,
    }
    assert build["input_cost_usd"] < build["input_cost_without_cache_usd"]
    assert second["totals"]["estimated"]["builds"] == 2


def test_cache_estimate_and_reported_usage_side_by_side_in_budget(alice, sid):
    alice.get(f"sessions/{sid}/context")
    response = alice.post(
        f"sessions/{sid}/usage",
        {
            "input_tokens": 30,
            "output_tokens": 100,
            "cache_creation_input_tokens": 2500,
            "cache_read_input_tokens": 0,
        },
    )
    assert response.status_code == 200, response.content
    alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c2", "ok")})
    alice.get(f"sessions/{sid}/context")
    alice.post(
        f"sessions/{sid}/usage",
        {
            "input_tokens": 40,
            "output_tokens": 50,
            "cache_creation_input_tokens": 60,
            "cache_read_input_tokens": 2500,
        },
    )
    cache = alice.get(f"sessions/{sid}/budget").json()["cache"]
    assert cache["reported"]["cache_read_input_tokens"] == 2500
    assert cache["reported"]["cost_usd"] == pytest.approx(
        (40 * 3 + 60 * 3.75 + 2500 * 0.3 + 50 * 15) / 1e6
    )
    side = cache["side_by_side"]
    assert side["cache_read_tokens"]["reported"] == 2500
    assert side["cache_read_tokens"]["estimated"] == cache["last_build"]["cache_read_tokens"] > 0
    assert set(side) == {
        "cache_read_tokens",
        "cache_write_tokens",
        "uncached_input_tokens",
        "input_cost_usd",
    }
    totals = cache["totals"]["reported"]
    assert totals["calls"] == 2 and totals["cache_read_input_tokens"] == 2500
    assert totals["cache_creation_input_tokens"] == 2560
    assert cache["totals"]["estimated"]["builds"] == 2


def test_preview_builds_record_nothing(alice, sid):
    session = Session.objects.get(external_id=sid)
    body = context_preview(session, "anthropic")
    assert body["budget"]["cache"]["last_build"]["cache_write_tokens"] > 0
    state = PromptState.objects.get(session=session)
    assert state.last_build == {} and state.cache_totals == {}


def test_s000_2_7_1_history_rebuilt_after_compaction(alice, sid):
    alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "next task"}, *tool_turn("c2", "done")]},
    )
    before = alice.get(f"sessions/{sid}/context").json()
    # What a compaction leaves: a summary, and a live window from seq 4 (the new task).
    Session.objects.filter(external_id=sid).update(
        summary="The test failed; fixed parser.py.", window_start_seq=4
    )
    body = alice.get(f"sessions/{sid}/context").json()
    texts = json.dumps(body["messages"])
    assert "Fix the failing test" not in texts and "FAILED test_x" not in texts
    # The summary enters the context with the search hint after it (engine.recall).
    summary = with_search_hint("The test failed; fixed parser.py.")
    assert body["messages"][0]["content"][0]["text"].endswith(summary)
    assert body["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    build = body["budget"]["cache"]["last_build"]
    system_prefix = before["budget"]["cache"]["last_build"]["breakpoints"]["prefix_tokens"][0]
    # Nothing of the pre-compaction history is reused: only tools + system still match.
    assert build["prefix_changed"] is True
    assert build["cache_read_tokens"] == system_prefix
    # (the unchanged scratchpad after the system breakpoint is identical too, but not cached)
    assert system_prefix < build["prefix_identical_tokens"] < system_prefix + 20
    # The transcript is untouched: the old turns are kept for audit.
    assert Message.objects.filter(session__external_id=sid).count() == 6


# --- docs/concepts/caching.md#degradation: graceful degradation -----------------------------------


def test_s002_8_section_assembly_failure_falls_back_to_plain_concatenation(
    alice, sid, monkeypatch, caplog
):
    from contextsvc.engine import prompt

    def boom(*args, **kwargs):
        raise RuntimeError("planner exploded")

    monkeypatch.setattr(prompt, "plan_breakpoints", boom)
    with caplog.at_level(logging.ERROR, logger="contextsvc.prompting"):
        response = alice.get(f"sessions/{sid}/context")
    assert response.status_code == 200
    body = response.json()
    assert markers(body) == 0
    assert len(body["system"]) == 1
    assert body["system"][0]["text"] == (
        f"Context: 12% used.\n\nscratch: look at parser.py\n\n{RULES}\n\n{BIG}"  # the agent's order
    )
    assert [d["component"] for d in body["budget"]["degraded"]] == ["sections"]
    assert "planner exploded" in body["budget"]["degraded"][0]["error"]
    assert "prompt assembly failed" in caplog.text
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert [d["component"] for d in budget["degraded"]] == ["sections"]
    monkeypatch.undo()
    alice.get(f"sessions/{sid}/context")
    assert alice.get(f"sessions/{sid}/budget").json()["degraded"] == []


def test_s002_8_accounting_failure_still_builds_the_context(alice, sid, monkeypatch):
    from contextsvc.engine import caching

    monkeypatch.setattr(caching, "estimate_cache", lambda **kw: 1 / 0)
    response = alice.get(f"sessions/{sid}/context")
    assert response.status_code == 200
    body = response.json()
    assert markers(body) == 2
    assert [d["component"] for d in body["budget"]["degraded"]] == ["accounting"]


def test_s002_8_builder_failure_in_the_format_falls_back(alice, sid, monkeypatch):
    from contextsvc.engine import build

    real = build.build_request

    def flaky(fmt, parts):
        if not parts.plain:
            raise KeyError("marker")
        return real(fmt, parts)

    monkeypatch.setattr("prompting.context.build.build_request", flaky)
    body = alice.get(f"sessions/{sid}/context").json()
    assert markers(body) == 0 and len(body["system"]) == 1
    assert [d["component"] for d in body["budget"]["degraded"]] == ["sections"]


# --- bad input --------------------------------------------------------------------------------


def test_too_many_sections_is_422_and_nothing_applied(alice, sid, settings):
    settings.CONTEXTSVC_MAX_SECTIONS = 3
    sections = [{"name": f"s{i}", "content": "x", "kind": "memory"} for i in range(4)]
    response = alice.put(f"sessions/{sid}/system", sections)
    assert response.status_code == 422
    error = response.json()["error"]
    assert "At most 3 sections" in error["message"] and "'s3'" in error["message"]
    assert error["details"]["field"] == "sections.3"
    assert [s["name"] for s in Session.objects.get(external_id=sid).sections] == [
        "status",
        "pad",
        "rules",
        "base",
    ]


def test_unknown_section_kind_is_422_naming_the_section(alice, sid):
    response = alice.put(
        f"sessions/{sid}/system",
        [
            {"name": "base", "content": "x", "kind": "base"},
            {"name": "diary", "content": "y", "kind": "journal"},
        ],
    )
    assert response.status_code == 422
    assert "'diary'" in response.json()["error"]["message"]
    assert "journal" in response.json()["error"]["message"]
    assert len(Session.objects.get(external_id=sid).sections) == 4


def test_duplicate_section_names_are_422(alice, sid):
    response = alice.put(
        f"sessions/{sid}/system",
        [{"name": "base", "content": "x"}, {"name": "base", "content": "y"}],
    )
    assert response.status_code == 422 and "'base'" in response.json()["error"]["message"]


def test_stranger_cannot_see_or_set_sections(bob, sid):
    assert bob.put(f"sessions/{sid}/system", [{"name": "x", "content": "y"}]).status_code == 404
    assert bob.get(f"sessions/{sid}/context").status_code == 404


# --- the per-process window cache of the context build ----------------------------------------


def test_context_after_appends_and_trims_is_never_stale(alice, sid):
    first = alice.get(f"sessions/{sid}/context").json()
    assert first["messages"][-1]["content"][0]["content"] == "FAILED test_x"
    alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c2", "second output")})
    body = alice.get(f"sessions/{sid}/context").json()  # appended rows read incrementally
    assert body["messages"][-1]["content"][0]["content"] == "second output"
    assert len(body["messages"]) == len(first["messages"]) + 2
    # An old row's view changes the way a trim does: row and counter together.
    row = Message.objects.get(session__external_id=sid, seq=3)
    Message.objects.filter(pk=row.pk).update(
        view="[tool output trimmed; ref=x]", view_state="trimmed", token_count=row.token_count - 2
    )
    session = Session.objects.get(external_id=sid)
    Session.objects.filter(pk=session.pk).update(
        conversation_tokens=session.conversation_tokens - 2
    )
    body = alice.get(f"sessions/{sid}/context").json()
    assert body["messages"][2]["content"][0]["content"] == "[tool output trimmed; ref=x]"
    assert body["budget"]["cache"]["last_build"]["prefix_changed"] is True
