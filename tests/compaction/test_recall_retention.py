"""The retention check counts a fact as recoverable only when reaching it was tested.

When the session's agent can call ``history_search``, a fact that left the window
is recoverable when the search finds it (docs/tool-output-cache.md, "Reaching what left
the context"); what the search cannot find is reported lost, whatever refs the
window still lists.
"""

from __future__ import annotations

import pytest

from sessions.models import RecallSegment
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

SEARCH_DEF = {
    "name": "history_search",
    "description": "search",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}
BASH_DEF = {
    "name": "bash",
    "description": "run a command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def failing_output(step: int) -> str:
    lines = [f"collecting step {step} item {i}" for i in range(60)]
    lines[30] = (
        f"ValueError: widget_{step} has no attribute frob_{step} while loading the "
        f"configuration section number {step} of the deployment manifest"
    )
    return "\n".join(lines) + "\n"


def compact(alice, sid: str) -> dict:
    response = alice.post(
        f"sessions/{sid}/compact", {"wait": True, "strategy": "summarize", "retain_last_turns": 1}
    )
    assert response.status_code == 200, response.content
    return response.json()


def session_with_errors(alice, make_session, tools: list[dict], **fields) -> str:
    sid = make_session(**fields)["id"]
    assert alice.put(f"sessions/{sid}/tools", tools).status_code == 200
    for step in range(1, 41):  # more errors than a summary's share lists
        messages = tool_turn(f"c{step}", failing_output(step))
        assert alice.post(f"sessions/{sid}/messages", {"messages": messages}).status_code == 200
    return sid


def run_retention(alice, sid: str) -> dict:
    run = compact(alice, sid)
    detail = alice.get(f"compactions/{run['run_id']}").json()
    return detail["retention"]


def test_facts_the_search_finds_are_recoverable(alice, make_session):
    sid = session_with_errors(alice, make_session, [BASH_DEF, SEARCH_DEF])
    retention = run_retention(alice, sid)
    assert retention["recoverable"] > 0, retention
    lost = {f["text"] for f in retention["lost"]}
    assert not any("ValueError" in text for text in lost), lost


def test_a_fact_the_search_cannot_find_is_lost(alice, make_session):
    sid = session_with_errors(alice, make_session, [BASH_DEF, SEARCH_DEF])
    # Index the session, then take the outputs out of the index: the facts are
    # still in the store, but the search does not find them, so they count lost.
    hits = alice.post(f"sessions/{sid}/tools/history_search/call", {"query": "widget_1 "})
    assert hits.json()["hits"]
    RecallSegment.objects.filter(source="output").delete()
    retention = run_retention(alice, sid)
    assert retention["recoverable"] == 0, retention
    lost = {f["kind"] for f in retention["lost"]}
    assert {"error", "ref"} <= lost, retention


def test_without_the_search_tool_only_refs_in_the_window_count(alice, make_session):
    no_builtins = {"proxy": {"builtin_tools": False}}
    sid = session_with_errors(alice, make_session, [BASH_DEF], policy=no_builtins)
    retention = run_retention(alice, sid)
    errors_lost = [f for f in retention["lost"] if f["kind"] == "error"]
    assert errors_lost, retention
