"""Running the pinned Codex CLI (``tests/agents``) offline against a base URL, as a test or the bench does.

``codex exec --json`` with ``HOME`` / ``CODEX_HOME`` in a scratch folder and
a custom provider (``wire_api = "responses"``: straight to HTTP + SSE) whose
``http_headers`` carry what contextsvc needs. ``bin/test --agents`` installs
the binary; the tests that run it carry the ``needs_agents`` mark.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakes.agent_bin import agent_binary
from fakes.streams import ScriptedReply, tool_call

ROOT = Path(__file__).resolve().parents[1]
FINAL = "FINAL ANSWER: every step ran."


def codex_binary() -> str:
    return agent_binary("codex", "Codex CLI")


@dataclass
class CodexRun:
    events: list[dict[str, Any]]
    returncode: int
    stderr: str

    def final_message(self) -> str:
        messages = [
            e["item"].get("text", "")
            for e in self.events
            if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
        ]
        return messages[-1] if messages else ""


def run_codex(
    *,
    base_url: str,
    api_key: str,
    task: str,
    scratch: Path,
    headers: dict[str, str] | None = None,
    settings: dict[str, Any] | None = None,
    model: str = "gpt-5.1-codex",
    timeout: float = 240,
) -> CodexRun:
    """One ``codex exec`` run (its JSON events), in ``scratch`` (home and working folder)."""
    home = scratch / "home"
    work = scratch / "work"
    home.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    header_text = ", ".join(f'"{k}" = "{v}"' for k, v in (headers or {}).items())
    provider = (
        f'{{name = "cs", base_url = "{base_url}", env_key = "CS_PROVIDER_KEY", '
        f'wire_api = "responses", http_headers = {{{header_text}}}}}'
    )
    args = [
        codex_binary(),
        "exec",
        "--skip-git-repo-check",
        "--json",
        "-c",
        f"model_providers.cs={provider}",
        "-c",
        "model_provider=cs",
    ]
    for key, value in (settings or {}).items():
        args += ["-c", f"{key}={json.dumps(value)}"]
    args += ["-m", model, task]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "CS_PROVIDER_KEY": api_key,
        "NO_COLOR": "1",
    }
    done = subprocess.run(
        args,
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    events = []
    for line in done.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return CodexRun(events=events, returncode=done.returncode, stderr=done.stderr)


class ShellLoop:
    """The fake model of a Codex task: ``steps`` shell commands with large outputs, then the answer."""

    def __init__(self, steps: int, lines: int = 3000) -> None:
        self.steps, self.lines, self.k = steps, lines, 0
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> ScriptedReply:
        with self.lock:
            k, self.k = self.k, self.k + 1
        if k >= self.steps:
            return ScriptedReply(text=FINAL)
        command = f"seq 1 {self.lines}; echo STEP-{k}"
        return ScriptedReply(
            thinking=f"step {k}", tool_calls=[tool_call("exec_command", {"cmd": command})]
        )
