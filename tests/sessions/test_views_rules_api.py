"""Views over the API (docs/concepts/trimming.md#views, docs/concepts/guard.md#tool-preflight):
cache reads posted back, images, trim switch."""

from __future__ import annotations

import pytest

from sessions.models import ToolOutput
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


def post(alice, sid: str, messages: list[dict]) -> dict:
    response = alice.post(f"sessions/{sid}/messages", {"messages": messages})
    assert response.status_code == 200, response.content
    return response.json()


def test_spec000_1_8_cache_read_posted_back_points_into_its_ref_and_is_cut_as_any(
    alice, make_session
):
    sid = make_session(policy={"tool_output_cache": {"max_message_bytes": 4096}})["id"]
    post(alice, sid, [{"role": "user", "content": "read the log"}])
    log = "".join(f"entry {i} " + "x" * 80 + "\n" for i in range(400))
    ref = post(alice, sid, tool_turn("c1", log))["messages"][-1]["output_ref"]
    page = alice.post(
        f"sessions/{sid}/tools/tool_output_cache/call", {"ref_id": ref, "limit": 100}
    ).json()
    assert len(page["text"].encode()) > 4096
    call = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "r1",
                    "name": "tool_output_cache",
                    "arguments": {"ref_id": ref, "limit": 100},
                }
            ],
        }
    ]
    outputs = ToolOutput.objects.count()
    body = post(
        alice, sid, [*call, {"role": "tool", "tool_call_id": "r1", "content": page["text"]}]
    )
    # Only the page's text was posted: the call's ref_id says which ref it read.
    result = body["messages"][-1]
    assert result["output_ref"] == ref and result["ref"] is None
    assert ToolOutput.objects.count() == outputs  # no new output, no new ref
    # Cut to the session's limits like any other result, by bytes.
    assert result["view"] == "cut"
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert len(raw["messages"][-1]["content"].encode()) <= 4096
    assert f"It read ref={ref}" in raw["messages"][-1]["content"]
    other = post(alice, sid, tool_turn("c2", page["text"]))["messages"][-1]
    assert other["view"] == "cut" and other["output_ref"] != ref


def test_spec000_1_5_stored_result_with_an_image_keeps_a_placeholder(alice, make_session):
    sid = make_session(policy={"tool_output_cache": {"max_message_bytes": 4096}})["id"]
    post(alice, sid, [{"role": "user", "content": "look"}])
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    content = [
        {"type": "text", "text": "rows\n" + "row\n" * 2000},
        image,
        {"type": "text", "text": "end"},
    ]
    call = tool_turn("c1", "")[0]
    body = post(alice, sid, [call, {"role": "tool", "tool_call_id": "c1", "content": content}])
    result = body["messages"][-1]
    assert result["view"] == "cut"
    found = alice.get(f"refs/{result['output_ref']}/grep", pattern=r"^\[image\]$").json()
    assert [m["line"] for m in found["matches"]] == [
        2003
    ]  # after the text part (its own newline ends line 2001, the join adds one)


def test_spec000_1_7_budget_trim_off_keeps_outputs_but_still_cuts(alice, make_session):
    policy = {
        "tool_output_cache": {
            "context_budget_tokens": 1000,
            "budget_trim": False,
            "max_message_bytes": 4096,
        }
    }
    sid = make_session(policy=policy)["id"]
    post(alice, sid, [{"role": "user", "content": "go"}])
    views = []
    for k in range(4):
        text = "".join(f"out {k} line {i} " + "y" * 40 + "\n" for i in range(200))
        views.append(post(alice, sid, tool_turn(f"c{k}", text))["messages"][-1]["view"])
    assert views == ["cut"] * 4  # per-message cut kept
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert [m["view"] for m in raw["messages"] if m["role"] == "tool"] == ["cut"] * 4


def test_spec000_1_7_budget_trim_on_trims_the_same_outputs(alice, make_session):
    policy = {"tool_output_cache": {"context_budget_tokens": 1000, "max_message_bytes": 4096}}
    sid = make_session(policy=policy)["id"]
    post(alice, sid, [{"role": "user", "content": "go"}])
    for k in range(4):
        text = "".join(f"out {k} line {i} " + "y" * 40 + "\n" for i in range(200))
        post(alice, sid, tool_turn(f"c{k}", text))
    raw = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert "trimmed" in [m["view"] for m in raw["messages"] if m["role"] == "tool"]


def test_spec000_1_7_bad_budget_trim_is_422(alice):
    response = alice.post(
        "sessions",
        {"model": "gpt-4o", "policy": {"tool_output_cache": {"budget_trim": "sometimes"}}},
    )
    assert response.status_code == 422
    assert "budget_trim" in str(response.json()["error"])
