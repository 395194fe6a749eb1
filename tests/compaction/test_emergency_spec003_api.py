"""docs/concepts/compaction.md#emergency through the API (POST /sessions/{sid}/overflow):
after the provider reported an overflow the context always shrinks, and ends
under the limit — down to the newest user message, inside one oversized turn
at an iteration boundary, the newest output kept."""

from __future__ import annotations

import pytest

from tests.conftest import tool_turn

from .conftest import LOG

pytestmark = pytest.mark.django_db


def overflow(client, sid: str) -> dict:
    response = client.post(
        f"sessions/{sid}/overflow?format=openai", {"detail": "prompt is too long: 999999 tokens"}
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_spec003_emergency_path_api_tiny_conversation_still_shrinks(alice, session_factory):
    session = session_factory(0)
    sid = session.external_id
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and now?"},
        {"role": "assistant", "content": "now this"},
    ]
    assert alice.post(f"sessions/{sid}/messages", {"messages": msgs}).status_code == 200
    before = alice.get(f"sessions/{sid}/budget").json()
    body = overflow(alice, sid)
    run = body["compaction"]
    assert run["status"] == "succeeded"
    assert body["budget"]["components"]["conversation"] + body["budget"]["components"][
        "summary"
    ] < (before["components"]["conversation"] + before["components"]["summary"])
    texts = [str(m["content"]) for m in body["messages"]]
    assert not any(t == "hi" for t in texts) and any("and now?" in t for t in texts)


def test_spec003_emergency_path_api_single_turn_agent_ends_under_the_limit(alice, session_factory):
    # Claude Code's shape: one user message, then a long tool loop past the window
    # (the tool-output trim off: only the emergency path touches the outputs here).
    session = session_factory(0, policy={"tool_output_cache": {"enabled": False}})
    sid = session.external_id
    task = "Fix the failing build in src/app; keep the public API stable."
    assert (
        alice.post(
            f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": task}]}
        ).status_code
        == 200
    )
    k = 0
    while True:  # iterate until past the compaction tier, as a busy agent does
        out = f"step {k}\n{LOG}"
        response = alice.post(
            f"sessions/{sid}/messages", {"messages": tool_turn(f"c{k}", out, command=f"make {k}")}
        )
        assert response.status_code == 200, response.content
        if response.json()["budget"]["guard"]["status"] in ("block", "final"):
            break
        k += 1
    newest = f"[Result of bash call c{k}]\nstep {k}\n{LOG}"
    before = alice.get(f"sessions/{sid}/context?format=openai").json()
    assert str(before["messages"][-1]["content"]) == newest or any(
        str(m["content"]) == newest for m in before["messages"]
    )
    body = overflow(alice, sid)
    assert body["compaction"]["status"] == "succeeded"
    budget = body["budget"]
    assert budget["guard"]["status"] != "final"
    assert budget["used"] <= budget["effective_window"]
    messages = [m for m in body["messages"] if m["role"] != "system"]
    # The task stays first, verbatim (in the retained block: the live window is
    # one run of messages); the newest iteration is intact.
    assert task in str(messages[0]["content"]) and messages[0]["role"] == "user"
    # No tools registered: the openai format sends calls and results as text.
    results = [str(m["content"]) for m in messages if "[Result of bash call" in str(m["content"])]
    assert results[-1] == newest
    assert len(results) < k + 1  # older iterations went
    # After the retain and the summary, the kept part starts at an iteration
    # (a call), never at a result whose call went.
    assert str(messages[2]["content"]).startswith("[Called bash")
