"""GET /context and /budget: one assembler, three formats, the guard and the final turn."""

from __future__ import annotations

import itertools
import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from sessions.models import Message, Session
from tests.fakes.transcripts import Transcript, windows

pytestmark = pytest.mark.django_db

TOOL = {
    "name": "bash",
    "description": "Run a command",
    "category": "builtin",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


@pytest.fixture
def conversation(alice, make_session):
    sid = make_session(id="ctx")["id"]
    alice.put(
        f"sessions/{sid}/system",
        [
            {
                "name": "scratch",
                "content": "notes: none yet",
                "kind": "scratchpad",
                "cacheable": False,
            },
            {"name": "base", "content": "You are a coding agent.", "kind": "base"},
        ],
    )
    alice.put(f"sessions/{sid}/tools", [TOOL])
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {"role": "user", "content": "Fix the bug"},
                {
                    "role": "assistant",
                    "content": "Looking.",
                    "tool_calls": [
                        {"id": "t1", "name": "bash", "arguments": {"command": "ls"}},
                        {"id": "t2", "name": "bash", "arguments": {"command": "cat x"}},
                    ],
                },
                {"role": "tool", "tool_call_id": "t1", "content": "x"},
                {"role": "tool", "tool_call_id": "t2", "content": "bug here"},
                {"role": "assistant", "content": "Fixed."},
            ]
        },
    )
    return sid


def test_anthropic_format(alice, conversation):
    body = alice.get(f"sessions/{conversation}/context", format="anthropic").json()
    assert body["model"] == "claude-sonnet-4-5" and body["max_tokens"] == 4096
    # docs/concepts/caching.md#section-order: sections static → dynamic whatever order they were
    # posted in
    assert [b["text"] for b in body["system"]] == ["You are a coding agent.", "notes: none yet"]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"]  # strict alternation
    results = body["messages"][2]["content"]
    assert [(b["type"], b["tool_use_id"]) for b in results] == [
        ("tool_result", "t1"),
        ("tool_result", "t2"),
    ]
    uses = [b for b in body["messages"][1]["content"] if b["type"] == "tool_use"]
    assert [u["input"] for u in uses] == [{"command": "ls"}, {"command": "cat x"}]
    assert body["tools"] == [
        {"name": "bash", "description": "Run a command", "input_schema": TOOL["input_schema"]}
    ]
    assert body["budget"]["guard"]["status"] == "ok"


def test_openai_format(alice, conversation):
    body = alice.get(f"sessions/{conversation}/context", format="openai").json()
    msgs = body["messages"]
    assert msgs[0] == {"role": "system", "content": "You are a coding agent.\n\nnotes: none yet"}
    assert [m["role"] for m in msgs[1:]] == ["user", "assistant", "tool", "tool", "assistant"]
    assert json.loads(msgs[2]["tool_calls"][1]["function"]["arguments"]) == {"command": "cat x"}
    assert msgs[3] == {"role": "tool", "tool_call_id": "t1", "content": "x"}
    assert body["tools"][0]["function"]["name"] == "bash"


def test_raw_format_carries_seq_and_token_counts(alice, conversation):
    body = alice.get(f"sessions/{conversation}/context", format="raw").json()
    assert [m["seq"] for m in body["messages"]] == [1, 2, 3, 4, 5]
    assert (
        sum(m["token_count"] for m in body["messages"])
        == body["budget"]["components"]["conversation"]
    )


def test_unknown_format_is_422(alice, conversation):
    response = alice.get(f"sessions/{conversation}/context", format="cohere")
    assert response.status_code == 422


def test_budget_components_and_thresholds_spec002(alice, conversation):
    budget = alice.get(f"sessions/{conversation}/budget").json()
    effective = 32_000 - 4_096 - 2_048
    assert budget["effective_window"] == effective
    c = budget["components"]
    assert budget["used"] == sum(c.values())
    assert budget["remaining"] == effective - budget["used"]
    assert budget["thresholds"]["compact_at"] == int(effective * 0.95)
    assert budget["thresholds"]["block_at"] == int(effective * 0.98)
    assert budget["guard"]["limit"] == effective


def _fill(alice, sid, tokens_wanted):
    """Post one user message of roughly the wanted size (chars/4 dominates for 'x ')."""
    return alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "x " * (tokens_wanted * 2)}]},
    )


def test_guard_tiers_ok_compact_block_final(alice, make_session):
    sid = make_session(id="tiers", context_window=10_000, max_output_tokens=1_000, buffer_tokens=0)[
        "id"
    ]
    limit = 9_000
    statuses = []
    budget = alice.get(f"sessions/{sid}/budget").json()
    statuses.append(budget["guard"]["status"])
    for extra in (int(limit * 0.96), int(limit * 0.99), limit + 10):
        statuses.append(
            alice.get(f"sessions/{sid}/budget", extra_tokens=extra).json()["guard"]["status"]
        )
    assert statuses == ["ok", "compact", "block", "final"]


# the final turn (docs/concepts/guard.md#final-turn) is for when compaction cannot make room (here:
# auto off).
NO_AUTO = {"compaction": {"auto": False}}


def test_final_restricts_tools_injects_instruction_and_marks_session_spec001(alice, make_session):
    sid = make_session(
        id="fin", context_window=4_000, max_output_tokens=500, buffer_tokens=0, policy=NO_AUTO
    )["id"]
    alice.put(f"sessions/{sid}/tools", [TOOL])
    _fill(alice, sid, 3_600)
    body = alice.get(f"sessions/{sid}/context").json()
    assert body["budget"]["guard"]["status"] == "final"
    assert [t["name"] for t in body["tools"]] == ["final_report"]
    last = body["messages"][-1]
    assert last["role"] == "user" and "final_report" in last["content"][-1]["text"]
    session = Session.objects.get(external_id=sid)
    assert (session.status, session.final_reason) == ("final", "context")
    assert alice.get(f"sessions/{sid}/budget").json()["status"] == "final"


def test_final_report_tool_name_is_configurable(alice, make_session):
    sid = make_session(
        id="fin2",
        context_window=4_000,
        max_output_tokens=500,
        buffer_tokens=0,
        policy={"final_report_tool": "submit", **NO_AUTO},
    )["id"]
    _fill(alice, sid, 3_600)
    body = alice.get(f"sessions/{sid}/context", format="openai").json()
    assert [t["function"]["name"] for t in body["tools"]] == ["submit"]
    assert "submit" in body["messages"][-1]["content"]


def test_skip_when_fallback_target_fits_spec001(alice, make_session):
    sid = make_session(
        id="targets",
        context_window=4_000,
        max_output_tokens=500,
        buffer_tokens=0,
        policy={"targets": [{"provider": "anthropic", "model": "claude-sonnet-4-5"}]},
    )["id"]
    _fill(alice, sid, 3_600)
    guard = alice.get(f"sessions/{sid}/budget").json()["guard"]
    assert [t["status"] for t in guard["targets"]] == ["skip", "ok"]
    assert guard["status"] == "block"  # not final: the fallback can take the request
    assert guard["targets"][1]["limit"] == 200_000 - 64_000 - 8_192


def test_schema_only_overflow_is_ok_spec001(alice, make_session):
    sid = make_session(id="schema", context_window=3_000, max_output_tokens=500, buffer_tokens=0)[
        "id"
    ]
    big_tool = {**TOOL, "description": "word " * 1_100}
    alice.put(f"sessions/{sid}/tools", [big_tool])
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["used"] > 2_500  # over the limit only because of the ×2.09 schema estimate
    guard = budget["guard"]
    assert guard["schema_only_overflow"] is True
    assert guard["targets"][0]["status"] == "ok"
    assert guard["status"] != "final"


def test_usage_total_and_calibration_spec000(alice, make_session):
    sid = make_session(id="usage")["id"]
    alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hello there"}]}
    )
    estimate = alice.get(f"sessions/{sid}/budget").json()["used"]
    response = alice.post(
        f"sessions/{sid}/usage",
        {
            "input_tokens": 1000,
            "output_tokens": 50,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 300,
        },
    )
    assert response.status_code == 200, response.content
    assert response.json()["total_tokens"] == 1550  # input + cache_creation + cache_read + output
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["calibrated_tokens"] == 1550
    assert budget["guard"]["projected"] == 1550  # the provider's count wins for its prefix
    assert budget["estimated_tokens"] == estimate
    appended = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "assistant", "content": "more"}]}
    ).json()
    added = appended["messages"][0]["token_count"]
    budget = alice.get(f"sessions/{sid}/budget").json()
    assert budget["guard"]["projected"] == 1550 + added
    report = budget["usage_reports"][0]
    assert (report["reported_total_tokens"], report["estimated_tokens"]) == (1550, estimate)


def test_usage_through_seq_beyond_end_is_422(alice, make_session):
    sid = make_session(id="usage2")["id"]
    response = alice.post(f"sessions/{sid}/usage", {"input_tokens": 5, "through_seq": 3})
    assert response.status_code == 422


def test_context_debug_logs_guard_topics_spec001(alice, make_session, settings, caplog):
    settings.CONTEXT_DEBUG = True
    sid = make_session(id="dbg")["id"]
    with caplog.at_level(logging.DEBUG, logger="contextsvc.guard"):
        alice.get(f"sessions/{sid}/budget")
    topics = [
        json.loads(r.getMessage())["topic"] for r in caplog.records if r.name == "contextsvc.guard"
    ]
    assert "context-guard/evaluate" in topics
    assert "context-guard/evaluate-target" in topics
    assert "context-guard/provider-eval" in topics


def test_context_at_block_or_final_compacts_first_when_compaction_can_help_spec002(
    alice, make_session, settings
):
    """docs/concepts/guard.md#block-compacts-first: blocked → compact before the LLM call. A session
    that compaction can save is not ended by the final turn."""
    from compaction.models import CompactionRun

    settings.CONTEXTSVC_SUMMARIZER = "offline"
    sid = make_session(id="save", context_window=8_000, max_output_tokens=500, buffer_tokens=0)[
        "id"
    ]
    for t in range(13):  # ~610 tokens a turn: past the 7,500 limit
        alice.post(
            f"sessions/{sid}/messages",
            {
                "messages": [
                    {"role": "user", "content": f"step {t}: " + "please look at this " * 120},
                    {"role": "assistant", "content": f"done with step {t}"},
                ]
            },
        )
    before = alice.get(f"sessions/{sid}/budget").json()
    assert before["guard"]["status"] in ("block", "final"), before["guard"]
    body = alice.get(f"sessions/{sid}/context").json()
    assert body["budget"]["guard"]["status"] in ("ok", "compact")
    assert "final_report" not in [t["name"] for t in body.get("tools", [])]
    assert body["budget"]["used"] < before["used"]
    assert Session.objects.get(external_id=sid).status == "active"
    run = CompactionRun.objects.get(session__external_id=sid)
    assert (run.trigger, run.status) == ("auto", "succeeded")


# --- every body GET /context builds is one the provider accepts ---------------------------


def as_posted(msg) -> dict:
    """An engine message as an agent posts it."""
    out = {"role": msg.role, "content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls
        ]
    if msg.tool_call_id:
        out["tool_call_id"] = msg.tool_call_id
    if msg.name:
        out["name"] = msg.name
    return out


def provider_bodies(alice, sid: str) -> tuple[dict, dict]:
    anthropic = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    openai = alice.get(f"sessions/{sid}/context", format="openai").json()
    for body in (anthropic, openai):
        body.pop("budget")
    validate(anthropic)
    validate_chat(openai)
    return anthropic, openai


def test_unanswered_call_is_closed_in_the_sent_context_only(alice, make_session):
    sid = make_session(id="unanswered")["id"]
    alice.put(f"sessions/{sid}/tools", [TOOL])
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {"role": "user", "content": "Fix the bug"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "t1", "name": "bash", "arguments": {}}],
                },
                {"role": "user", "content": "Stop, look at x instead"},
            ]
        },
    )
    anthropic, openai = provider_bodies(alice, sid)
    results = anthropic["messages"][2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "text"]
    assert results[0]["tool_use_id"] == "t1" and "no result" in results[0]["content"]
    assert [m["role"] for m in openai["messages"]] == ["user", "assistant", "tool", "user"]
    # The transcript and the raw view are as the agent posted them.
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert [m["role"] for m in raw["messages"]] == ["user", "assistant", "user"]
    assert list(
        Message.objects.filter(session__external_id=sid).values_list("role", flat=True)
    ) == [
        "user",
        "assistant",
        "user",
    ]


def test_window_starting_at_a_tool_call_starts_with_a_user_turn(alice, make_session):
    sid = make_session(id="cut-window")["id"]
    alice.put(f"sessions/{sid}/tools", [TOOL])
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "Reading."},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "t1", "name": "bash", "arguments": {}}],
                },
                {"role": "tool", "tool_call_id": "t1", "content": "listing"},
            ]
        },
    )
    for start in (2, 3, 4):  # an assistant text, a tool call, an orphaned result
        Session.objects.filter(external_id=sid).update(window_start_seq=start)
        anthropic, openai = provider_bodies(alice, sid)
        assert anthropic["messages"][0]["role"] == "user"
        assert "listing" in json.dumps(anthropic) and "listing" in json.dumps(openai)


_ids = itertools.count()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(t=windows(max_messages=10), cuts=st.lists(st.integers(1, 10), max_size=3))
def test_context_of_any_transcript_passes_both_providers_checks(alice, make_session, t, cuts):
    """Real sessions: the transcript posted in batches, a window and summary as compaction
    leaves them, GET /context in both formats."""
    t: Transcript
    sid = make_session(id=f"prop-{next(_ids)}")["id"]
    if t.tool_names:
        tools = [{"name": n, "input_schema": {"type": "object"}} for n in t.tool_names]
        assert alice.put(f"sessions/{sid}/tools", tools).status_code == 200
    posted = [as_posted(m) for m in t.messages]
    edges = sorted({0, len(posted), *(c for c in cuts if c < len(posted))})
    for a, b in itertools.pairwise(edges):
        response = alice.post(f"sessions/{sid}/messages", {"messages": posted[a:b]})
        assert response.status_code == 200, response.content
    # What a compaction leaves: the window moved, a retain and a summary.
    Session.objects.filter(external_id=sid).update(
        window_start_seq=t.window_start + 1, retain=t.retain, summary=t.summary
    )
    # Every context is sendable, an empty window's too (engine.wellformed.with_user_turn).
    anthropic, openai = provider_bodies(alice, sid)
    roles = [m["role"] for m in anthropic["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
