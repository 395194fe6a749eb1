"""Claude Code in the test suite: the pinned CLI run offline, and a fake model that answers it as an agent.

``BashAgent`` is the fake Messages API's ``agent`` (``FakeAnthropic.agent``):
for a request that offers the ``Bash`` tool it asks for ``steps`` Bash
commands, one per call, each printing a marked block of ``lines`` lines (far
more, together, than a small window holds), then answers ``FINAL_ANSWER``.
Which step comes next is read from the newest ``STEP-<k>-BEGIN`` marker in the
request, so the agent follows the conversation it is shown (through the proxy
or straight) and never keeps state between calls. Requests without ``Bash``
(title generation, a quota probe, Claude Code's own compaction) get a short
text answer; a compaction request gets a ``<summary>``.

``run_claude`` runs ``claude -p`` with HOME in a scratch folder, offline
(no auto-updater, no non-essential traffic), and returns its JSON result.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakes.agent_bin import agent_binary
from fakes.streams import ScriptedReply

FINAL_ANSWER = "FINAL: every step ran"
TASK = "Run the numbered Bash steps the tool asks for, then report."
STEP_MARK = re.compile(r"STEP-(\d+)-BEGIN")
# How Claude Code's own compaction request (its history + this text, tools offered) begins.
COMPACT_PROMPT = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools."


def claude_binary() -> str:
    return agent_binary("claude", "Claude Code")


def _texts(body: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
            continue
        for block in content or ():
            if block.get("type") == "text":
                out.append(block.get("text", ""))
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, str):
                    out.append(inner)
                else:
                    out.extend(b.get("text", "") for b in inner or () if b.get("type") == "text")
    return out


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {t.get("name", "") for t in body.get("tools") or ()}


@dataclass
class BashAgent:
    """The fake model as an agent (module doc). ``calls`` counts the requests it answered."""

    steps: int = 12
    lines: int = 2500
    calls: int = 0
    compactions: int = 0  # Claude Code's own compaction requests answered
    side_requests: list[dict[str, Any]] = field(default_factory=list)

    def command(self, step: int) -> str:
        return f"echo STEP-{step}-BEGIN; seq 1 {self.lines}; echo STEP-{step}-END"

    def __call__(self, body: dict[str, Any]) -> ScriptedReply:
        self.calls += 1
        texts = _texts(body)
        if "Bash" not in _tool_names(body):
            self.side_requests.append(body)
            last = texts[-1] if texts else ""
            if "summary" in last.lower():
                return ScriptedReply(text=f"<summary>\nThe task: {TASK}\n</summary>")
            return ScriptedReply(text="Side answer")
        done = [int(m) for text in texts for m in STEP_MARK.findall(text)]
        if texts and texts[-1].startswith(COMPACT_PROMPT):
            # Claude Code compacting itself: its summary carries the steps done,
            # so the agent goes on from the right step after the restart.
            self.compactions += 1
            marks = " ".join(f"STEP-{k}-BEGIN" for k in sorted(set(done)))
            return ScriptedReply(text=f"<summary>\nThe task: {TASK}\nDone: {marks}\n</summary>")
        step = max(done) + 1 if done else 0
        if step >= self.steps:
            return ScriptedReply(text=FINAL_ANSWER)
        return ScriptedReply(
            tool_calls=[
                {
                    "name": "Bash",
                    "arguments": {"command": self.command(step), "description": f"step {step}"},
                    "id": None,
                }
            ]
        )


def run_claude(
    base_url: str,
    api_key: str,
    home: Path,
    *,
    model: str = "claude-fake-large",
    headers: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    prompt: str = TASK,
    extra_args: list[str] | None = None,
    timeout: float = 120,
) -> tuple[int, dict[str, Any] | None, str]:
    """``claude -p`` against ``base_url``: (exit code, its JSON result or None, stderr)."""
    binary = claude_binary()
    assert binary is not None
    home.mkdir(parents=True, exist_ok=True)
    work = home / "work"
    work.mkdir(exist_ok=True)
    run_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
    }
    if headers:
        run_env["ANTHROPIC_CUSTOM_HEADERS"] = "\n".join(f"{k}: {v}" for k, v in headers.items())
    run_env.update(env or {})
    done = subprocess.run(
        [
            binary,
            "-p",
            prompt,
            "--output-format",
            "json",
            "--allowedTools",
            "Bash",
            "--model",
            model,
            *(extra_args or ()),
        ],
        cwd=work,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    result = None
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            result = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    return done.returncode, result, done.stderr


def scratch_home(tmp_path: Path, name: str = "home") -> Path:
    home = tmp_path / name
    shutil.rmtree(home, ignore_errors=True)
    return home


SUBTASK = "SUBTASK: report the date"


@dataclass
class SubAgentTask:
    """The fake model asks Claude Code for one sub-agent (its ``Agent`` tool), then answers.

    Claude Code runs the sub-agent as requests of its own: another system
    prompt (its billing line says ``cc_is_subagent=true``) and fewer tools,
    under the same ``x-claude-code-session-id``.
    """

    def __call__(self, body: dict[str, Any]) -> ScriptedReply:
        if "cc_is_subagent=true" in json.dumps(body.get("system")):
            return ScriptedReply(text="sub-agent: it is today")
        if SUBTASK not in json.dumps(body.get("messages")):
            arguments = {
                "description": "date",
                "prompt": SUBTASK,
                "subagent_type": "general-purpose",
            }
            return ScriptedReply(tool_calls=[{"name": "Agent", "arguments": arguments, "id": None}])
        return ScriptedReply(text=FINAL_ANSWER)
