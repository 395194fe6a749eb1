"""Every compaction run records why it was requested, with its numbers
(docs/concepts/compaction.md#reasons): one test per path that creates a run, through
the API where the run is shown, and the sentence the API and the run card give."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from compaction.models import CompactionRun
from compaction.reason_text import reason_text
from compaction.services.requests import compaction_request
from compaction.services.tool import compact_context_tool
from sessions.models import Session
from sessions.services.append import session_append_messages

from .conftest import turn

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
# The SMALL session of conftest: effective window 13,000, compact at 12,350, block at 12,740.
WINDOW, COMPACT_AT, BLOCK_AT = 13_000, 12_350, 12_740


def _parts(reason: dict) -> int:
    """What ``used`` is made of: the identity the reason's parts keep."""
    keys = ("fixed", "history", "calibration", "reserved", "extra")
    return sum(reason.get(k, 0) for k in keys)


def _api_run(alice, run: CompactionRun) -> dict:
    response = alice.get(f"compactions/{run.pk}")
    assert response.status_code == 200, response.content
    return response.json()


def test_an_automatic_run_at_the_compact_line_records_the_threshold_it_crossed(
    session_factory, alice, django_capture_on_commit_callbacks
):
    session = session_factory(6)
    system = [{"name": "base", "content": "You are a careful coding agent. " * 40}]
    assert alice.request("PUT", f"sessions/{session.external_id}/system", system).status_code == 200
    session.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        session_append_messages(session=session, messages=turn(6))
    session.refresh_from_db()
    run = CompactionRun.objects.get(session=session)
    reason = run.reason
    assert run.trigger == "auto" and reason["kind"] == "threshold"
    assert reason["fixed"] == session.system_tokens > 0
    assert reason["used"] == session.used_tokens  # no reservation, no calibration yet
    assert (reason["threshold"], reason["compact_at"], reason["block_at"]) == (
        COMPACT_AT,
        COMPACT_AT,
        BLOCK_AT,
    )
    assert reason["window"] == WINDOW and reason["tier"] == session.guard_status
    assert reason["used"] >= COMPACT_AT and reason["check"] == "assistant"
    assert reason["used"] == _parts(reason) and reason["history"] < reason["used"]
    body = _api_run(alice, run)
    assert body["reason"] == reason
    text = body["reason_text"]
    assert text.startswith(f"threshold crossed: {reason['used']:,} used ≥ 12,350 compact-at")
    assert f"({reason['history']:,} history + {reason['fixed']:,} system, skills and tools)" in text
    assert text.endswith("seen after an assistant message")
    listed = alice.get(f"sessions/{session.external_id}/compactions").json()["items"][0]
    assert listed["reason"] == reason and listed["reason_text"] == text


def test_a_reservation_makes_a_small_history_cross_the_line_and_the_reason_says_so(
    session_factory, alice, django_capture_on_commit_callbacks
):
    """The operators' case: an automatic run whose history (what the run card's
    before/after counts) is far below compact-at. The projection the guard measures
    also holds the reservations; the reason shows them."""
    session = session_factory(2)
    sid = session.external_id
    tokens = COMPACT_AT - session.used_tokens + 200  # fits the window, crosses compact-at
    reserved = alice.post(
        f"sessions/{sid}/tools/reserve", {"tool_call_id": "big", "tokens": tokens}
    )
    assert reserved.status_code == 200 and reserved.json()["ok"], reserved.content
    session.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        session_append_messages(session=session, messages=[{"role": "assistant", "content": "ok"}])
    run = CompactionRun.objects.get(session=session)
    reason = run.reason
    assert reason["kind"] == "threshold" and reason["check"] == "assistant"
    assert reason["reserved"] == reserved.json()["reserved_tokens"] > 0
    assert reason["history"] < COMPACT_AT / 2 <= COMPACT_AT <= reason["used"]
    assert reason["used"] == _parts(reason)
    text = _api_run(alice, run)["reason_text"]
    assert f"{reason['reserved']:,} reserved for tool outputs" in text
    assert f"{reason['history']:,} history" in text


def test_the_cost_planner_compacts_below_the_line_and_records_its_trigger(
    session_factory, enqueued, alice, django_capture_on_commit_callbacks
):
    """The other way a run starts under compact-at: the planner's cheapest cycle."""
    session = session_factory(
        0, context_window=64_000, policy={"tool_output_cache": {"context_budget_tokens": 60_000}}
    )
    t = 0
    while not enqueued and t < 40:
        with django_capture_on_commit_callbacks(execute=True):
            session_append_messages(session=session, messages=turn(t, text_words=50))
        t += 1
    run = CompactionRun.objects.get(pk=enqueued[0][0])
    reason = run.reason
    assert reason["kind"] == "planner" and reason["action"] == "compact"
    assert reason["threshold"] <= reason["used"] < reason["compact_at"]
    assert reason["tier"] == "ok" and reason["floor"] < reason["threshold"]
    assert reason["per_call"] > 0 and reason["cost"] > 0
    text = _api_run(alice, run)["reason_text"]
    assert text.startswith(
        f"the cost planner found compacting pays: {reason['used']:,} used ≥ {reason['threshold']:,}"
    )
    assert f"below the {reason['compact_at']:,} compact-at" in text


def test_a_fixed_trigger_ratio_records_its_line(
    session_factory, alice, django_capture_on_commit_callbacks
):
    policy = {"compaction": {"threshold_ratio": 0.5, "planner": "threshold"}}
    session = session_factory(3, policy=policy)
    with django_capture_on_commit_callbacks(execute=True):
        session_append_messages(session=session, messages=turn(3))
    reason = CompactionRun.objects.get(session=session).reason
    assert reason["kind"] == "ratio" and reason["setting"] == "threshold_ratio"
    assert reason["ratio"] == 0.5 and reason["threshold"] == math.floor(0.5 * WINDOW)
    assert reason["threshold"] <= reason["used"] < COMPACT_AT
    text = reason_text(reason)
    assert "≥ 6,500 (0.5 of the 13,000 window, policy threshold_ratio)" in text


def test_a_policy_change_since_the_last_run_is_part_of_the_reason(
    session_factory, alice, django_capture_on_commit_callbacks
):
    session = session_factory(3)
    sid = session.external_id
    patched = alice.patch(f"sessions/{sid}", {"policy": {"thresholds": {"compact_at": 0.5}}})
    assert patched.status_code == 200, patched.content
    session.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        session_append_messages(session=session, messages=turn(3))
    reason = CompactionRun.objects.get(session=session).reason
    assert reason["kind"] == "threshold" and reason["compact_at"] == math.floor(0.5 * WINDOW)
    change = reason["policy_change"]
    assert change["actor"] == "agent key alice"
    # None: the default applied before (no value stored).
    assert {"field": "thresholds.compact_at", "old": None, "new": 0.5} in change["changes"]
    text = _api_run(alice, CompactionRun.objects.get(session=session))["reason_text"]
    assert "the policy changed since the last compaction (" in text
    assert "thresholds.compact_at default → 0.5" in text and "by agent key alice" in text


def test_an_output_that_did_not_fit_records_its_size(
    alice, make_session, enqueued, django_capture_on_commit_callbacks
):
    small = {"context_window": 8_000, "max_output_tokens": 1_000, "buffer_tokens": 0}
    # No insertion cap (view_share 1): the output reaches the tool preflight whole.
    sid = make_session(**small, policy={"tool_output_cache": {"view_share": 1}})["id"]
    first = {"role": "user", "content": "read the log " + "w " * 5_000}
    assert alice.post(f"sessions/{sid}/messages", {"messages": [first]}).status_code == 200
    output = "".join(f"row {i:06d} " + "x" * 100 + "\n" for i in range(400))
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "cat log"}}],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": output}
    with django_capture_on_commit_callbacks(execute=True):
        posted = alice.post(f"sessions/{sid}/messages", {"messages": [call, result]}).json()
    shown = posted["messages"][-1]
    run = CompactionRun.objects.get(session__external_id=sid)
    reason = run.reason
    assert run.trigger == "auto" and reason["kind"] == "tool_overflow"
    assert reason["seq"] == shown["seq"] and reason["view"] == shown["view"] == "cut"
    assert reason["kept_tokens"] == shown["token_count"]
    assert reason["output_tokens"] > reason["kept_tokens"]
    assert reason["window"] == 7_000 and reason["used"] > reason["window"]
    assert reason["tier"] == "final"
    text = _api_run(alice, run)["reason_text"]
    assert text.startswith(
        f"an output of {reason['output_tokens']:,} tokens did not fit even cut to"
        f" {reason['kept_tokens']:,}: the context stood at {reason['used']:,} > 7,000 limit"
    )


def test_compacting_before_a_call_records_the_room_the_call_asked_for(session_factory, alice):
    session = session_factory(2)
    sid = session.external_id
    extra = BLOCK_AT - session.used_tokens + 500
    response = alice.get(f"sessions/{sid}/context", extra_tokens=extra)
    assert response.status_code == 200, response.content
    run = CompactionRun.objects.get(session=session)
    reason = run.reason
    assert run.trigger == "auto" and reason["kind"] == "preflight"
    assert reason["extra"] == extra and reason["threshold"] == BLOCK_AT
    assert reason["used"] == session.used_tokens + extra == _parts(reason)
    assert reason["tier"] in ("block", "final")
    text = _api_run(alice, run)["reason_text"]
    assert f"before a call: {reason['used']:,} used ≥ 12,740 block-at" in text
    assert f"{extra:,} asked for by the call" in text


def test_an_overflow_reported_over_the_api_records_the_providers_count(session_factory, alice):
    session = session_factory(4)
    sid = session.external_id
    response = alice.post(
        f"sessions/{sid}/overflow", {"detail": "prompt is too long", "reported_tokens": 15_321}
    )
    assert response.status_code == 200, response.content
    shown = response.json()["compaction"]
    reason = shown["reason"]
    assert shown["trigger"] == "emergency" and reason["kind"] == "overflow"
    assert reason["source"] == "api" and reason["reported_tokens"] == 15_321
    assert reason["used"] == session.used_tokens and reason["window"] == WINDOW
    assert reason["context_window"] == 16_000
    assert shown["reason_text"] == (
        "the client reported a context overflow (POST /overflow): the provider counted"
        f" 15,321 tokens; our estimate was {session.used_tokens:,} of a 13,000 window"
    )


def test_a_manual_run_over_the_api_names_the_key(session_factory, alice, alice_key):
    session = session_factory(4)
    response = alice.post(f"sessions/{session.external_id}/compact", {"wait": True})
    assert response.status_code == 200, response.content
    body = _api_run(alice, CompactionRun.objects.get(pk=response.json()["run_id"]))
    reason = body["reason"]
    key = alice_key[0]
    assert reason["kind"] == "manual" and reason["via"] == "api"
    assert (reason["key"], reason["key_prefix"]) == ("alice", key.prefix)
    assert reason["used"] == session.used_tokens
    assert body["reason_text"] == (
        f"manual, through the API by key alice ({key.prefix}…)"
        f" (at {session.used_tokens:,} used, compact-at 12,350)"
    )


def test_the_compact_context_tool_records_the_agents_call(session_factory, alice):
    session = session_factory(4)
    used = session.used_tokens
    result = compact_context_tool(session, {})
    run = CompactionRun.objects.get(pk=result["run_id"])
    assert run.trigger == "tool" and run.reason["kind"] == "tool"
    assert run.reason["tool"] == "compact_context" and run.reason["used"] == used
    assert _api_run(alice, run)["reason_text"] == (
        f"the agent called compact_context (at {used:,} used, compact-at 12,350)"
    )


def test_a_run_recorded_before_reasons_shows_none(session_factory, alice):
    session = session_factory(1)
    old = CompactionRun.objects.create(session=session, trigger="auto", status="succeeded")
    assert old.reason == {}
    body = _api_run(alice, old)
    assert body["reason"] is None and body["reason_text"] is None
    listed = alice.get(f"sessions/{session.external_id}/compactions").json()["items"]
    assert listed[0]["reason"] is None


def test_a_run_cannot_be_requested_without_a_reason(session_factory):
    session = session_factory(2)
    with pytest.raises(TypeError):
        compaction_request(session=session, trigger="manual")  # type: ignore[call-arg]
    for bad in ({}, {"kind": "because"}, None):
        with pytest.raises(ValueError, match="needs a reason"):
            compaction_request(session=session, trigger="manual", reason=bad)  # type: ignore[arg-type]
    assert not CompactionRun.objects.exists()
    assert Session.objects.get(pk=session.pk).window_start_seq == session.window_start_seq


def _calls(names: set[str]):
    for package in ("compaction", "proxy", "sessions", "prompting", "contextsvc", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    func = node.func
                    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    if name in names:
                        yield path.relative_to(ROOT), node


def test_every_call_site_that_requests_a_run_passes_a_reason():
    """Besides the required keyword: a call site no test reaches still names its reason."""
    found = list(_calls({"compaction_request", "compaction_auto_request"}))
    assert len(found) >= 9  # hooks ×2, requests, sync, tool, api, dashboard, proxy, benches
    missing = [
        f"{path}:{node.lineno}"
        for path, node in found
        if "reason" not in {k.arg for k in node.keywords}
    ]
    assert not missing, f"compaction requested without a reason at {missing}"


def test_old_or_odd_reasons_render_without_error():
    assert reason_text({}) == "" and reason_text(None) == ""
    assert reason_text({"kind": "from-the-future", "x": 1}) == "from-the-future"
    odd = {"kind": "threshold", "used": "many", "history": None, "fixed": [1]}
    assert reason_text(odd).startswith("threshold crossed: many used ≥ ? compact-at")
    assert reason_text({"kind": "manual", "via": "dashboard"}) == (
        "manual, from the dashboard by operator ?"
    )
    assert reason_text({"kind": "client", "form": "checkpoint", "used": 10_572}) == (
        "the client compacted its own history, with Codex's checkpoint request (at 10,572 used)"
    )
    assert reason_text(
        {"kind": "overflow", "source": "proxy", "reported_tokens": 52_000, "limit": 30_000}
    ) == ("upstream answered context overflow: the request was 52,000 tokens > 30,000 maximum")
    assert reason_text({"kind": "tool_overflow"}).startswith("a tool output did not fit")
