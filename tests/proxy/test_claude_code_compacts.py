"""The real Claude Code compacting its own history, through the live proxy.

Claude Code compacts at the start of a turn when its context passes its own
threshold (``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` × ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`` %
here, so a short run reaches it): it sends its history with its summarise
prompt, then restarts from the summary. Through the proxy that is the
divergence rule: nothing stored is lost, the live window restarts from the
client's new view, and the session records a client compaction.
"""

from __future__ import annotations

import pytest

from fakes.claude_code import (
    COMPACT_PROMPT,
    FINAL_ANSWER,
    STEP_MARK,
    BashAgent,
    run_claude,
)
from proxy.models import ClientCompaction
from sessions.models import Message, Session
from tests.proxy.claude_code_live import messages_requests, start_proxy
from tests.proxy.conftest import PROXY_DB

pytestmark = [pytest.mark.needs_postgres, pytest.mark.needs_agents, *PROXY_DB]

FIRST, SECOND = 6, 2  # Bash steps in the first turn, then in the turn after the compaction
LINES = 1_500  # the first turn's outputs pass Claude Code's threshold below
CLIENT_LIMITS = {
    "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "60000",
    "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "5",
}


def _steps_in_transcript(session: Session) -> list[int]:
    outputs = Message.objects.filter(session=session, role="tool").order_by("seq")
    return [
        int(m)
        for text in outputs.values_list("content", flat=True)
        for m in STEP_MARK.findall(text)
    ]


def test_claude_code_compacts_itself_and_the_proxy_keeps_everything(
    tmp_path, fake_anthropic, alice, alice_key
):
    sid = "cc-self-compacting"
    response = alice.post("sessions", {"id": sid, "model": "claude-sonnet-4-5"})
    assert response.status_code == 201, response.content
    agent = fake_anthropic.agent = BashAgent(steps=FIRST, lines=LINES)
    home = tmp_path / "home"
    with start_proxy(tmp_path, fake_anthropic, managed=True) as port:
        base = f"http://127.0.0.1:{port}/proxy/anthropic"
        headers = {"X-Contextsvc-Session": sid}
        code, result, err = run_claude(base, alice_key[1], home, headers=headers)
        assert code == 0, (err, result)
        assert agent.compactions == 0
        # The next turn of the same conversation (--continue) starts over the threshold.
        agent.steps = FIRST + SECOND
        code, result, err = run_claude(
            base,
            alice_key[1],
            home,
            headers=headers,
            env=CLIENT_LIMITS,
            prompt="Run the remaining steps, then report.",
            extra_args=["--continue"],
        )
    assert code == 0, (err, result)
    assert result["result"] == FINAL_ANSWER

    # Claude Code compacted itself, through the proxy, and upstream accepted all of it.
    requests = messages_requests(fake_anthropic)
    assert agent.compactions >= 1
    assert any(COMPACT_PROMPT in str(r.body["messages"][-1]) for r in requests)
    assert [r.error for r in requests if r.status != 200] == []

    session = Session.objects.get(external_id=sid)
    # The client's compaction is recorded as such (the dashboard's event) ...
    assert ClientCompaction.objects.filter(session=session).count() >= 1
    # ... and nothing stored was lost: every step's full output, in order, once each
    # before and after the restart (the re-sent view re-appends the summary, not outputs).
    steps = _steps_in_transcript(session)
    assert steps[:FIRST] == list(range(FIRST))
    assert set(steps) == set(range(FIRST + SECOND))
    assert steps[-SECOND:] == list(range(FIRST, FIRST + SECOND))
    # The live window restarted from the client's new view: the last request upstream
    # carries the client's summary, not the first turn's outputs.
    last = str(requests[-1].body["messages"])
    assert "Done: STEP-0-BEGIN" in last
    assert f"STEP-{FIRST + SECOND - 1}-BEGIN" in last
