"""A compacted session's summary names the search tool when, and only when, its agent has it
(``recall.search_available``): the proxy's built-ins off, or no output cache, means no hint;
what the budget counts for the summary is what is sent."""

from __future__ import annotations

import pytest

from contextsvc.engine.recall import SEARCH_HINT, SEARCH_TOOL_NAME
from contextsvc.engine.strategies.base import TokenCounter
from contextsvc.engine.summary_placement import SUMMARY_HEADER, preamble
from sessions import accounting
from sessions.models import Session
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "policy, named",
    [
        ({}, True),
        ({"proxy": {"builtin_tools": False}}, False),
        ({"tool_output_cache": {"enabled": False}}, False),
    ],
)
def test_a_compacted_summary_names_history_search_only_when_the_agent_has_it(
    alice, make_session, policy, named
):
    sid = make_session(policy=policy)["id"]
    for t in range(3):
        turn = [{"role": "user", "content": f"Turn {t}: fix src/mod{t}.py"}]
        turn += tool_turn(f"c{t}", f"checked /tmp/run{t}.log\n" + "ok\n" * 200)
        turn.append({"role": "assistant", "content": f"Turn {t} done."})
        alice.post(f"sessions/{sid}/messages", {"messages": turn})
    response = alice.post(f"sessions/{sid}/compact", {"wait": True, "strategy": "summarize"})
    assert response.status_code == 200 and response.json()["status"] == "succeeded"

    body = alice.get(f"sessions/{sid}/context").json()
    texts = [
        block["text"] if isinstance(block, dict) else block
        for msg in body["messages"]
        for block in (msg["content"] if isinstance(msg["content"], list) else [msg["content"]])
    ]
    summary = next(t for t in texts if t.startswith(SUMMARY_HEADER))
    assert summary.count(SEARCH_HINT) == (1 if named else 0)
    assert (SEARCH_TOOL_NAME in summary) is named
    # The stored summary is the summariser's text; the hint is added where it is sent,
    # and the summary counter covers exactly that.
    session = Session.objects.get(external_id=sid)
    assert SEARCH_HINT not in session.summary
    counter = TokenCounter(accounting.tokenizer_of(session), accounting.estimate_config_of(session))
    sent = counter.messages(preamble(session.retain, session.summary, named))
    assert session.summary_tokens == sent
