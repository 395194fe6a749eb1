"""docs/concepts/guard.md#tool-budget over the API: uncounted report tools, preview = charge,
refusals."""

from __future__ import annotations

import pytest

from sessions.models import Message
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_insertion_cap(monkeypatch):
    """These tests exercise the views and trims of docs/concepts/trimming.md#views and the refusals
    of docs/concepts/guard.md#tool-preflight on outputs far over the insertion cap
    (``tool_output_cache.view_share``, 0.02 of the window by default), which would cut them small
    first: the cap is off here (the window times ten: a cap of the window itself still cut an
    11k-token output to a view a few tokens either side of the limit, and whether it was refused
    hung on the size of its notice); it is tested in test_output_view_cap.py."""
    monkeypatch.setattr("contextsvc.engine.output_views.DEFAULT_VIEW_SHARE", 10.0)


SMALL = {"context_window": 8_000, "max_output_tokens": 1_000, "buffer_tokens": 0}  # limit 7,000


def tool(name: str) -> dict:
    return {
        "name": name,
        "description": f"The {name} tool. " * 30,
        "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}},
        "category": "builtin",
    }


def schema_tokens(alice, sid: str) -> int:
    return alice.get(f"sessions/{sid}/budget").json()["components"]["tool_descriptions"]


def test_spec001_final_report_and_task_status_tools_not_in_schema_tokens(alice, make_session):
    only = make_session()["id"]
    alice.put(f"sessions/{only}/tools", [tool("bash")])
    both = make_session()["id"]
    alice.put(f"sessions/{both}/tools", [tool("bash"), tool("final_report"), tool("task_status")])
    assert schema_tokens(alice, both) == schema_tokens(alice, only) > 0
    # Still offered to the model.
    sent = alice.get(f"sessions/{both}/context", format="anthropic").json()["tools"]
    assert [t["name"] for t in sent] == ["bash", "final_report", "task_status"]


def test_spec001_report_tools_named_by_policy_and_counted_when_asked(alice, make_session):
    named = make_session(policy={"final_report_tool": "done", "task_status_tool": "progress"})
    alice.put(f"sessions/{named['id']}/tools", [tool("bash"), tool("done"), tool("progress")])
    only = make_session()["id"]
    alice.put(f"sessions/{only}/tools", [tool("bash")])
    assert schema_tokens(alice, named["id"]) == schema_tokens(alice, only)
    counted = make_session(policy={"count_report_tools": True})["id"]
    alice.put(f"sessions/{counted}/tools", [tool("bash"), tool("final_report")])
    assert schema_tokens(alice, counted) > schema_tokens(alice, only)


@pytest.mark.parametrize("width", [100, 3_000])  # a whole view, and a cut one carrying its ref
def test_spec001_preview_price_equals_what_the_posted_result_is_charged(alice, make_session, width):
    sid = make_session()["id"]
    text = "".join(f"line {i} " + "y" * width + "\n" for i in range(3))
    alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "go"}, tool_turn("c1", text)[0]]},
    )
    price = alice.post(
        f"sessions/{sid}/tools/preview", {"tool_call_id": "c1", "text": text}
    ).json()["tokens"]
    result = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "tool", "tool_call_id": "c1", "content": text}]},
    ).json()["messages"][-1]
    assert result["view"] == ("full" if width == 100 else "cut")
    assert result["token_count"] == price


def older_outputs(alice, sid: str, n: int = 3) -> list[int]:
    seqs = []
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "go"}]})
    for k in range(n):
        text = "".join(f"old {k} row {i} is a line of output\n" for i in range(30))
        body = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn(f"o{k}", text)}).json()
        seqs.append(body["messages"][-1]["seq"])
    return seqs


def test_spec001_output_that_cannot_fit_is_refused_before_older_ones_are_trimmed(
    alice, make_session
):
    sid = make_session(**SMALL, policy={"compaction": {"auto": False}})["id"]
    old = older_outputs(alice, sid)
    huge = "".join(f"row {i} " + "x" * 100 + "\n" for i in range(400))  # ~11k tokens
    body = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("big", huge)}).json()
    assert body["messages"][-1]["view"] == "failed"
    assert body["trimmed_seqs"] == []
    states = dict(
        Message.objects.filter(session__external_id=sid, seq__in=old).values_list(
            "seq", "view_state"
        )
    )
    assert set(states.values()) == {"full"}  # nothing trimmed for an output refused anyway


def test_spec001_one_refusal_does_not_refuse_a_later_small_output(alice, make_session):
    sid = make_session(**SMALL, policy={"compaction": {"auto": False}})["id"]
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "go"}]})
    huge = "".join(f"row {i} " + "x" * 100 + "\n" for i in range(400))
    first = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("a", huge)}).json()
    assert first["messages"][-1]["view"] == "failed"
    later = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("b", "small\n")}).json()
    assert later["messages"][-1]["view"] == "full"
    # In one batch too: the big one refused, the small one after it kept.
    both = alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": "c", "name": "bash", "arguments": {}},
                        {"id": "d", "name": "bash", "arguments": {}},
                    ],
                },
                {"role": "tool", "tool_call_id": "c", "content": huge},
                {"role": "tool", "tool_call_id": "d", "content": "tiny\n"},
            ]
        },
    ).json()
    assert [m["view"] for m in both["messages"][1:]] == ["failed", "full"]
    # And a small reservation still fits after a refused one.
    refused = alice.post(f"sessions/{sid}/tools/reserve", {"tokens": 50_000}).json()
    assert refused["ok"] is False
    assert alice.post(f"sessions/{sid}/tools/reserve", {"tokens": 10}).json()["ok"] is True


def test_spec001_sticky_refusal_is_the_configurable_alternative(alice, make_session):
    policy = {"compaction": {"auto": False}, "tool_budget_sticky": True}
    sid = make_session(**SMALL, policy=policy)["id"]
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "go"}]})
    huge = "".join(f"row {i} " + "x" * 100 + "\n" for i in range(400))
    alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("a", huge)})
    later = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("b", "small\n")}).json()
    assert later["messages"][-1]["view"] == "failed"


@pytest.mark.parametrize(
    "policy",
    [{"tool_budget_sticky": "maybe"}, {"count_report_tools": []}, {"task_status_tool": "a b"}],
)
def test_spec001_bad_tool_budget_knobs_are_422(alice, policy):
    response = alice.post("sessions", {"model": "gpt-4o", "policy": policy})
    assert response.status_code == 422
    assert next(iter(policy)) in str(response.json()["error"])
