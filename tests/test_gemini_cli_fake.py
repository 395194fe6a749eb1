"""Gemini CLI (pinned, offline) against the fake Gemini server: the fake speaks what the real
client sends — streamed generateContent with systemInstruction, functionDeclarations,
a functionCall run by the CLI's shell tool and its functionResponse — and every request the
CLI made passed the fake's checks of what the real API accepts."""

from __future__ import annotations

import pytest

from fakes.gemini_cli import ShellSteps, run_gemini
from fakes.gemini_server import FakeGemini
from fakes.shell_steps import FINAL
from fakes.streams import ScriptedReply, tool_call

pytestmark = [pytest.mark.needs_agents]

TASK = "Run the shell steps you are given, then report."


def test_gemini_cli_runs_a_shell_step_against_the_fake(tmp_path):
    with FakeGemini(api_key="test-key") as fake:
        fake.script(
            ScriptedReply(tool_calls=[tool_call("run_shell_command", {"command": "echo STEP-0"})]),
            ScriptedReply(text="Done: STEP-0."),
        )
        code, result, err = run_gemini(
            fake.base_url, "test-key", tmp_path / "home", "Run echo STEP-0, then report."
        )
        requests = fake.generate_requests()
    assert code == 0, err[-2000:]
    assert result is not None and result["response"].strip() == "Done: STEP-0."
    assert len(requests) == 2 and all(r.status == 200 for r in requests)
    assert all(":streamGenerateContent" in r.path and "alt=sse" in r.path for r in requests)
    first, second = (r.body for r in requests)
    assert first["systemInstruction"] and first["tools"][0]["functionDeclarations"]
    names = {d["name"] for d in first["tools"][0]["functionDeclarations"]}
    assert "run_shell_command" in names
    # The CLI ran the command and sent its output back as the call's functionResponse.
    answer = [p for c in second["contents"] for p in c["parts"] if "functionResponse" in p]
    assert answer and answer[-1]["functionResponse"]["name"] == "run_shell_command"
    assert "STEP-0" in str(answer[-1]["functionResponse"]["response"])


def test_gemini_cli_follows_the_scripted_agent_through_its_steps(tmp_path):
    agent = ShellSteps(steps=3, lines=5)
    with FakeGemini(api_key="test-key", agent=agent) as fake:
        code, result, err = run_gemini(fake.base_url, "test-key", tmp_path / "home", TASK)
        statuses = [r.status for r in fake.generate_requests()]
    assert code == 0, err[-2000:]
    assert result["response"].strip() == FINAL
    assert statuses == [200] * 4  # three steps and the answer
