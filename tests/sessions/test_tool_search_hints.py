"""docs/concepts/deferral.md#tool-search over the API: the "## Available Tools" listing,
``search_hint`` on PUT /tools."""

from __future__ import annotations

import pytest

from contextsvc.engine.deferral import DEFERRAL_NOTE

pytestmark = pytest.mark.django_db


def mcp(name: str, description: str, hint: str | None = None) -> dict:
    tool = {
        "name": name,
        "description": description + " It talks to the remote server." * 40,
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
        "category": "mcp",
    }
    if hint is not None:
        tool["search_hint"] = hint
    return tool


# Never-used tools listed last are deferred first: the hinted one is deferred.
TOOLS = [
    *(mcp(f"mcp__acme__op{i}", f"Operation {i} of Acme.") for i in range(20)),
    mcp("mcp__acme__run", "Runs a job on the Acme platform.", "deploy release ship"),
]


def setup(alice, make_session, **policy) -> str:
    sid = make_session(policy=policy)["id"]
    response = alice.put(f"sessions/{sid}/tools", TOOLS)
    assert response.status_code == 200, response.content
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "Go"}]})
    return sid


def tail_text(body: dict) -> str:
    return body["messages"][-1]["content"][-1]["text"]


def test_s002_5_api_note_lists_deferred_tools_with_first_sentences(alice, make_session):
    sid = setup(alice, make_session)
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    deferral = body["budget"]["deferral"]
    text = tail_text(body)
    head, listing = text.split("\n\n## Available Tools\n")
    assert head == DEFERRAL_NOTE.format(n=deferral["deferred_count"])
    lines = listing.split("\n")
    assert len(lines) == deferral["deferred_count"] > 0
    sent = {t["name"] for t in body["tools"]}
    for line in lines:
        name, sentence = line.removeprefix("- ").split(": ", 1)
        assert name not in sent
        assert sentence.startswith(("Operation", "Runs a job")) and sentence.endswith(".")
        assert "remote server" not in sentence  # the first sentence only
    # Never sent to the model: the hint is for tool_search alone.
    assert all("search_hint" not in t for t in body["tools"])


def test_s002_5_api_count_style_keeps_the_one_line_note(alice, make_session):
    sid = setup(alice, make_session, tool_deferral_note="count")
    body = alice.get(f"sessions/{sid}/context", format="anthropic").json()
    assert tail_text(body) == DEFERRAL_NOTE.format(n=body["budget"]["deferral"]["deferred_count"])


def test_s002_5_api_search_hint_is_matched_by_tool_search(alice, make_session):
    sid = setup(alice, make_session)
    body = alice.post(
        f"sessions/{sid}/tools/tool_search/call", {"query": "ship the release"}
    ).json()
    assert [m["name"] for m in body["matches"]][:1] == ["mcp__acme__run"]


def test_s002_5_api_changing_only_the_hint_rebuilds_the_search(alice, make_session):
    sid = setup(alice, make_session)
    call = f"sessions/{sid}/tools/tool_search/call"
    assert alice.post(call, {"query": "frobnicate"}).json()["matches"] == []
    retagged = [*TOOLS[:-1], dict(TOOLS[-1], search_hint="frobnicate")]
    assert alice.put(f"sessions/{sid}/tools", retagged).status_code == 200
    matches = alice.post(call, {"query": "frobnicate"}).json()["matches"]
    assert [m["name"] for m in matches] == ["mcp__acme__run"]


@pytest.mark.parametrize("hint", ["x" * 1001, 12, ["deploy"]])
def test_s002_5_api_bad_search_hint_is_422_naming_the_field(alice, make_session, hint):
    sid = make_session()["id"]
    response = alice.put(f"sessions/{sid}/tools", [mcp("mcp__a__b", "B.", hint)])
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert "search_hint" in str(error)
    assert alice.get(f"sessions/{sid}").json().get("tools") in (None, [])


def test_s002_5_api_bad_deferral_note_style_is_422(alice):
    response = alice.post("sessions", {"model": "gpt-4o", "policy": {"tool_deferral_note": "x"}})
    assert response.status_code == 422
    assert "tool_deferral_note" in str(response.json()["error"])
