"""Tool clearing and the sandwich through the API: tool-result clearing
(docs/concepts/compaction.md#tool-clearing / clear_tool_uses) and the sandwich
(docs/concepts/compaction.md#compression-not-needed: COMPRESSION_NOT_NEEDED, the summary in the
system role), each with its policy knobs validated."""

from __future__ import annotations

import re

import pytest

from sessions.models import Message, Session
from tests.conftest import tool_turn

from .conftest import turn

pytestmark = pytest.mark.django_db


def compact(client, sid: str, strategy: str):
    return client.post(f"sessions/{sid}/compact", {"strategy": strategy, "wait": True})


# --- docs/concepts/compaction.md#tool-clearing ----------------------------------------------------


def test_spec002_6_clearing_api_min_size_and_original_size_in_the_note(alice, session_factory):
    session = session_factory(0, policy={"compaction": {"keep_tool_uses": 1}})
    sid = session.external_id
    small = {"role": "tool", "tool_call_id": "s1", "content": "ok\n" * 10}
    msgs = [
        *turn(0, calls=3),
        {"role": "user", "content": "one more"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "s1", "name": "bash", "arguments": {"command": "true"}}],
        },
        small,
    ]
    assert alice.post(f"sessions/{sid}/messages", {"messages": msgs}).status_code == 200
    response = compact(alice, sid, "tool_clearing")
    assert response.status_code == 200, response.content
    tools = list(Message.objects.filter(session=session, role="tool").order_by("seq"))
    # keep 1 (the small newest); the three big ones go, each note naming its size.
    assert [t.view_state for t in tools] == ["cleared", "cleared", "cleared", "full"]
    for t in tools[:3]:
        size = len(t.content.encode())
        assert t.view == f"[tool output cleared; ref={t.output_ref}; was {size:,} bytes]", t.view


def test_spec002_6_clearing_api_small_results_are_not_cleared(alice, session_factory):
    session = session_factory(
        0, policy={"compaction": {"keep_tool_uses": 0, "clear_min_bytes": 1_000_000}}
    )
    sid = session.external_id
    assert alice.post(f"sessions/{sid}/messages", {"messages": turn(0)}).status_code == 200
    compact(alice, sid, "tool_clearing")
    assert not Message.objects.filter(session=session, view_state="cleared").exists()


def test_spec002_6_clearing_api_oldest_half(alice, session_factory):
    session = session_factory(0, policy={"compaction": {"clear_mode": "oldest_half"}})
    sid = session.external_id
    assert alice.post(f"sessions/{sid}/messages", {"messages": turn(0, calls=4)}).status_code == 200
    assert alice.post(f"sessions/{sid}/messages", {"messages": turn(1, calls=2)}).status_code == 200
    assert compact(alice, sid, "tool_clearing").status_code == 200
    states = list(
        Message.objects.filter(session=session, role="tool")
        .order_by("seq")
        .values_list("view_state", flat=True)
    )
    assert states == ["cleared"] * 3 + ["full"] * 3


@pytest.mark.parametrize(
    "knob,value",
    [
        ("clear_min_bytes", -1),
        ("clear_mode", "newest_half"),
        ("adaptive_keep", "sometimes"),
        ("error_keep_factor", 0),
        ("dense_tool_uses", 0),
        ("sandwich_min_middle", 0),
        ("sandwich_sections", "yes please"),
        ("summary_role", "assistant"),
    ],
)
def test_spec_rules_policy_knobs_are_validated_with_bounds(alice, knob, value):
    response = alice.post(
        "sessions", {"model": "claude-sonnet-4-5", "policy": {"compaction": {knob: value}}}
    )
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and knob in str(error)


def test_spec_rules_policy_knobs_accepted_and_stored(alice):
    policy = {
        "clear_min_bytes": 0,
        "clear_mode": "oldest_half",
        "adaptive_keep": True,
        "error_keep_factor": 3,
        "dense_tool_uses": 5,
        "sandwich_min_middle": 2,
        "sandwich_sections": False,
        "summary_role": "system",
    }
    response = alice.post(
        "sessions", {"model": "claude-sonnet-4-5", "policy": {"compaction": policy}}
    )
    assert response.status_code in (200, 201), response.content
    stored = Session.objects.get(external_id=response.json()["id"]).policy["compaction"]
    assert {k: stored[k] for k in policy} == policy


# --- docs/concepts/compaction.md#sandwich ---------------------------------------------------------


def chat(n: int) -> list[dict]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "w " * 300}
        for i in range(n)
    ]


def test_spec004_compression_not_needed_api_is_409_and_changes_nothing(alice, session_factory):
    session = session_factory(0, policy={"compaction": {"strategy": "sandwich"}})
    sid = session.external_id
    assert alice.post(f"sessions/{sid}/messages", {"messages": chat(8)}).status_code == 200
    before = alice.get(f"sessions/{sid}/context?format=raw").json()
    response = compact(alice, sid, "sandwich")
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "COMPRESSION_NOT_NEEDED"
    assert "too short to compress" in error["message"]
    after = alice.get(f"sessions/{sid}/context?format=raw").json()
    assert after["messages"] == before["messages"] and after["summary"] == ""


def test_spec004_compression_not_needed_api_min_middle(alice, session_factory):
    session = session_factory(0, policy={"compaction": {"sandwich_min_middle": 4}})
    sid = session.external_id
    assert alice.post(f"sessions/{sid}/messages", {"messages": chat(12)}).status_code == 200
    response = compact(alice, sid, "sandwich")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "COMPRESSION_NOT_NEEDED"


@pytest.mark.parametrize(
    "policy,system_role",
    [({"strategy": "sandwich"}, True), ({"strategy": "sandwich", "summary_role": "user"}, False)],
)
def test_cx_t7_sandwich_summary_in_the_system_role_api(alice, session_factory, policy, system_role):
    session = session_factory(0, policy={"compaction": policy})
    sid = session.external_id
    assert alice.post(f"sessions/{sid}/messages", {"messages": chat(16)}).status_code == 200
    response = compact(alice, sid, "sandwich")
    assert response.status_code == 200, response.content
    anthropic = alice.get(f"sessions/{sid}/context?format=anthropic").json()
    openai = alice.get(f"sessions/{sid}/context?format=openai").json()
    in_system = [
        b["text"] for b in anthropic["system"] if "Earlier conversation summary" in b["text"]
    ]
    system_msgs = [
        m
        for m in openai["messages"]
        if m["role"] == "system" and "Earlier conversation" in m["content"]
    ]
    user_summary = [
        m
        for m in openai["messages"]
        if m["role"] == "user" and "[Summary of the earlier conversation]" in str(m["content"])
    ]
    if system_role:
        assert len(in_system) == 1 and len(system_msgs) == 1 and not user_summary
        assert re.match(r"\[Earlier conversation summary: .+\]$", system_msgs[0]["content"], re.S)
    else:
        assert not in_system and not system_msgs and len(user_summary) == 1


# --- docs/concepts/context-build.md#safe-cuts -----------------------------------------------------


@pytest.mark.parametrize("strategy", ["drop_oldest_turns", "summarize"])
def test_spec003_turn_boundaries_api_compaction_cuts_only_at_a_turn_start(
    alice, session_factory, strategy
):
    # Turns of uneven length: halving the turn count or keeping the last turn
    # must still land on a user message, never before an assistant message
    # in the middle of a turn.
    session = session_factory(0)
    sid = session.external_id
    for t, calls in enumerate([1, 4, 2, 3]):
        response = alice.post(f"sessions/{sid}/messages", {"messages": turn(t, calls=calls)})
        assert response.status_code == 200
    response = compact(alice, sid, strategy)
    assert response.status_code == 200, response.content
    assert response.json()["changed"]
    session.refresh_from_db()
    first = Message.objects.get(session=session, seq=session.window_start_seq)
    assert first.role == "user", (strategy, first.role, first.seq)
    raw = alice.get(f"sessions/{sid}/context?format=raw").json()
    assert raw["messages"][0]["role"] == "user"


@pytest.mark.parametrize(
    "adaptive,expected",
    [
        (False, ["cleared", "cleared", "cleared", "full", "full"]),
        (True, ["cleared", "full", "full", "full", "full"]),
    ],
)
def test_spec002_6_clearing_api_adaptive_keep_keeps_an_error_heavy_stretch(
    alice, session_factory, adaptive, expected
):
    # 5 results in 5 turns, the 4 newest failing: an error-heavy stretch (the
    # agent is debugging) doubles the keep count from 2 to 4 (adaptive_keep).
    policy = {"keep_tool_uses": 2, "adaptive_keep": adaptive, "error_keep_factor": 1}
    session = session_factory(0, policy={"compaction": policy})
    sid = session.external_id
    for k in range(5):
        output = ("Error: build failed\n" if k else "build ok\n") + "detail line\n" * 120
        msgs = [{"role": "user", "content": f"try {k}"}, *tool_turn(f"c{k}", output)]
        assert alice.post(f"sessions/{sid}/messages", {"messages": msgs}).status_code == 200
    assert compact(alice, sid, "tool_clearing").status_code == 200
    states = list(
        Message.objects.filter(session=session, role="tool")
        .order_by("seq")
        .values_list("view_state", flat=True)
    )
    assert states == expected
