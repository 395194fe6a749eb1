"""A scripted shell task for the fake model, whatever the agent CLI: ``steps`` steps, then the answer.

Each step is one shell call whose output (``lines`` lines between its BEGIN
and DONE marks) comes back to the model; the next step is the one after the
highest DONE mark the request holds (tool results, or the summary after a
compaction), so a compacted history carries on from the right step. Each
agent's script reads its own API's request and names its own shell tool
(``fakes.opencode``, ``fakes.gemini_cli``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fakes.streams import ScriptedReply, tool_call

STEP_DONE = re.compile(r"STEP-(\d+)-DONE")
FINAL = "All steps are done."


def steps_done(text: str) -> list[int]:
    """The steps whose DONE mark ``text`` holds."""
    return [int(n) for n in STEP_DONE.findall(text)]


@dataclass
class StepScript:
    steps: int = 3
    lines: int = 20
    calls: int = 0

    def command(self, step: int) -> str:
        return f"echo STEP-{step}-BEGIN; seq 1 {self.lines}; echo STEP-{step}-DONE"

    def next_step(self, done: list[int]) -> int | None:
        """The step to ask for after ``done``; None once every step is done."""
        step = max(done) + 1 if done else 0
        return None if step >= self.steps else step

    def step_reply(self, step: int | None, tool: str) -> ScriptedReply:
        """``step`` as a call of the shell ``tool``, or the final answer."""
        if step is None:
            return ScriptedReply(text=FINAL)
        return ScriptedReply(
            text=f"Step {step}.", tool_calls=[tool_call(tool, {"command": self.command(step)})]
        )
