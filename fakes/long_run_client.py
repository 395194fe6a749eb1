"""The SDK client of the long run (``fakes.long_run``): an agent loop that runs Bash itself."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic

from fakes.long_run import TASK, LongTask

BASH_TOOL = {
    "name": "Bash",
    "description": "Run a bash command and return its output",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
        "required": ["command"],
    },
}


@dataclass
class ClientRun:
    """What the SDK client saw: the last answer, its calls, replies with nothing in them, a refusal."""

    answer: str = ""
    calls: int = 0
    empty: int = 0
    error: str | None = None


def _run_bash(command: str, cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout + done.stderr or f"(exit {done.returncode}, no output)"


def run_sdk_agent(
    client: anthropic.Anthropic, task: LongTask, *, model: str, cwd: Path, max_calls: int = 5000
) -> ClientRun:
    """An agent loop on the SDK: the task's turn, then the question's; it runs Bash itself.

    It keeps its whole history and sends it each call, as a plain SDK agent
    does: keeping it inside a window is the proxy's work.
    """
    run = ClientRun()
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for turn in (TASK, task.question()):
        if turn is not TASK:
            messages.append({"role": "user", "content": turn})
        while run.calls < max_calls:
            run.calls += 1
            try:
                response = client.messages.create(
                    model=model, max_tokens=4000, messages=messages, tools=[BASH_TOOL]
                )
            except anthropic.APIStatusError as exc:
                run.error = f"{exc.status_code}: {exc.message}"
                return run
            content = [b.model_dump(exclude_none=True) for b in response.content]
            texts = [b["text"] for b in content if b["type"] == "text" and b["text"].strip()]
            uses = [b for b in content if b["type"] == "tool_use"]
            if not texts and not uses:
                run.empty += 1
            messages.append({"role": "assistant", "content": content or "(empty)"})
            if not uses:
                run.answer = "\n".join(texts)
                break
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": u["id"],
                    "content": _run_bash(u["input"]["command"], cwd),
                }
                for u in uses
            ]
            messages.append({"role": "user", "content": results})
    return run
