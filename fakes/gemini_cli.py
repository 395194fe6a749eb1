"""Gemini CLI (pinned in tests/agents) run headless and offline against a base URL.

``run_gemini`` gives it a scratch ``HOME`` whose settings make it run without
a browser or Google's hosts: the API-key auth type (a custom base URL would
otherwise select the gateway type, which headless mode refuses), folder trust
off, usage statistics and telemetry off. It sends the key as
``x-goog-api-key``, and the headers of ``GEMINI_CLI_CUSTOM_HEADERS``
(``Name: value`` pairs, comma-separated) with every request: that is how a
proxy's own headers (``X-Contextsvc-Key``) reach the proxy. ``-m`` names the
model, which skips its routing request to a smaller model.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakes.agent_bin import agent_binary
from fakes.shell_steps import StepScript, steps_done
from fakes.streams import ScriptedReply

SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


def gemini_binary() -> str:
    return agent_binary("gemini", "Gemini CLI")


def run_gemini(
    base_url: str,
    api_key: str,
    home: Path,
    prompt: str,
    *,
    model: str | None = "gemini-fake-pro",
    headers: dict[str, str] | None = None,
    compression_threshold: float | None = None,
    timeout: float = 120,
) -> tuple[int, dict[str, Any] | None, str]:
    """``gemini -p <prompt> --yolo`` against ``base_url``: (exit code, its JSON result, stderr).

    ``model`` None lets the CLI pick its model (a routing request to a smaller
    model first); ``compression_threshold`` is the share of its window past which
    it compresses its own history; ``resume`` continues its latest conversation.
    """
    settings: dict[str, Any] = dict(SETTINGS)
    if compression_threshold is not None:
        settings["model"] = {"compressionThreshold": compression_threshold}
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    work = home / "work"
    work.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GEMINI_API_KEY": api_key,
        "GOOGLE_GEMINI_BASE_URL": base_url,
    }
    if headers:
        env["GEMINI_CLI_CUSTOM_HEADERS"] = ",".join(f"{k}: {v}" for k, v in headers.items())
    args = [gemini_binary(), "-p", prompt, "--yolo", "--output-format", "json"]
    args += ["-m", model] if model else []
    done = subprocess.run(
        args,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    try:
        result = json.loads(done.stdout[done.stdout.index("{") :]) if "{" in done.stdout else None
    except json.JSONDecodeError:
        result = None
    return done.returncode, result, done.stderr


def side_answer(body: dict[str, Any]) -> ScriptedReply:
    """The answer to one of the CLI's side requests: JSON where it asks for JSON (its
    routing question wants a complexity score), else a summary that keeps which steps
    are done, as a model asked to compress the history would."""
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json":
        properties = (config.get("responseJsonSchema") or {}).get("properties") or {}
        answer = {
            name: 10
            if spec.get("type", "").upper() in ("INTEGER", "NUMBER")
            else "A scripted task."
            for name, spec in properties.items()
        }
        return ScriptedReply(text=json.dumps(answer))
    done = sorted(set(steps_done(json.dumps(body.get("contents")))))
    if not done:
        return ScriptedReply(text="Side answer.")
    marks = " ".join(f"STEP-{k}-DONE" for k in done)
    return ScriptedReply(text=f"<state_snapshot>Steps done: {marks}</state_snapshot>")


@dataclass
class ShellSteps(StepScript):
    """The fake model as an agent for Gemini CLI (``fakes.shell_steps``): each step is a
    ``run_shell_command`` whose output comes back as a ``functionResponse``.
    Requests without the shell tool (the CLI's side requests) get a short text.
    """

    def __call__(self, body: dict[str, Any]) -> ScriptedReply:
        self.calls += 1
        declared = {
            d.get("name")
            for tool in body.get("tools") or ()
            for d in tool.get("functionDeclarations") or ()
        }
        if "run_shell_command" not in declared:
            return side_answer(body)
        answers = [
            part["functionResponse"]
            for content in body.get("contents") or ()
            for part in content.get("parts") or ()
            if "functionResponse" in part
        ]
        text = json.dumps(answers) + json.dumps(body.get("contents")[:1])  # a summary goes first
        return self.step_reply(self.next_step(steps_done(text)), "run_shell_command")
