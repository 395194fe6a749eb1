"""opencode (pinned in tests/agents) run headless and offline against a Chat Completions base URL.

``run_opencode`` gives it a scratch ``HOME`` whose ``opencode.json`` declares
one provider through the bundled ``@ai-sdk/openai-compatible`` package:
``options.baseURL`` (the fake's or the proxy's ``.../v1``), ``options.apiKey``
(sent as ``Authorization: Bearer``), ``options.headers`` (sent with every
request: how ``X-Contextsvc-Key`` reaches the proxy) and one model whose
``limit.context`` sets where opencode compacts by itself.

What keeps it offline:

- ``OPENCODE_DISABLE_MODELS_FETCH``: no catalogue from models.dev;
- autoupdate, sharing, LSP downloads and the default (npm) plugins off;
- a pre-made ``~/.config/opencode`` package folder: opencode installs
  ``@opencode-ai/plugin`` into each config folder in the background unless
  that folder has a ``node_modules`` and a ``package-lock.json`` whose root
  lists it. Nothing imports it without a plugin of the user's own, so the
  folder stays empty;
- ``npm_config_registry`` (which opencode's installs follow) at a closed local
  port: should it install something after all, it fails at once instead of
  downloading (a test passes ``registry=`` a recorder of its own to see that
  nothing asked).

It sends, per run: the main calls (its system prompt, ten-odd tools,
``stream: true``) and, alongside the first one, a title request without tools
(system "You are a title generator..."), all with ``x-session-id`` (its
session id, ``ses_...``) and the user agent ``opencode/<version> ai-sdk/...``.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakes.agent_bin import agent_binary
from fakes.shell_steps import StepScript, steps_done
from fakes.streams import ScriptedReply

ROOT = Path(__file__).resolve().parents[1]
PROVIDER = "contextsvc"
TITLE_PROMPT = "You are a title generator."
# opencode's own compaction: a summarise request of its own (no tools, this system prompt,
# the history flattened into one user message), then the main conversation restarts as
# "What did we do so far?", the summary, the last turns kept whole, and CONTINUE_PROMPT.
SUMMARISE_PROMPT = "You are a context summarization agent."
SUMMARISE_REQUEST = "Here is the conversation so far:"
COMPACT_QUESTION = "What did we do so far?"
CONTINUE_PROMPT = "Continue if you have next steps"
_OFFLINE_ENV = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
}
CLOSED_REGISTRY = "http://127.0.0.1:9/"


def opencode_binary() -> str:
    return agent_binary("opencode", "opencode")


def opencode_config(
    base_url: str,
    api_key: str,
    *,
    model: str,
    context_limit: int,
    output_limit: int,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ``opencode.json`` of a run: one OpenAI-compatible provider with one model."""
    options: dict[str, Any] = {"baseURL": base_url, "apiKey": api_key}
    if headers:
        options["headers"] = dict(headers)
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{PROVIDER}/{model}",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "contextsvc",
                "options": options,
                "models": {
                    model: {
                        "name": model,
                        "tool_call": True,
                        "limit": {"context": context_limit, "output": output_limit},
                    }
                },
            }
        },
    }


def _premade_plugin_folder(config_dir: Path) -> None:
    # opencode's check (Npm.install): a node_modules folder, and every dependency of
    # package.json plus @opencode-ai/plugin in the root entry of package-lock.json.
    deps = {"@opencode-ai/plugin": "*"}
    (config_dir / "node_modules").mkdir(parents=True, exist_ok=True)
    (config_dir / "package.json").write_text(json.dumps({"dependencies": deps}))
    lock = {"lockfileVersion": 3, "requires": True, "packages": {"": {"dependencies": deps}}}
    (config_dir / "package-lock.json").write_text(json.dumps(lock))


def run_opencode(
    base_url: str,
    api_key: str,
    home: Path,
    prompt: str,
    *,
    model: str = "gpt-fake-large",
    context_limit: int = 200_000,
    output_limit: int = 4_000,
    headers: dict[str, str] | None = None,
    registry: str = CLOSED_REGISTRY,
    timeout: float = 120,
) -> tuple[int, list[dict[str, Any]], str]:
    """``opencode run --format json <prompt>`` in ``home``: (exit code, its JSON events, stderr)."""
    config_dir = home / ".config" / "opencode"
    config_dir.mkdir(parents=True, exist_ok=True)
    config = opencode_config(
        base_url,
        api_key,
        model=model,
        context_limit=context_limit,
        output_limit=output_limit,
        headers=headers,
    )
    (config_dir / "opencode.json").write_text(json.dumps(config, indent=1))
    _premade_plugin_folder(config_dir)
    work = home / "work"
    work.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "npm_config_registry": registry,
        **_OFFLINE_ENV,
    }
    done = subprocess.run(
        [opencode_binary(), "run", "--print-logs", "--format", "json", prompt],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    events = []
    for line in done.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return done.returncode, events, done.stderr


def final_text(events: list[dict[str, Any]]) -> str:
    """The text of the run's last text event ("" when it wrote none)."""
    texts = [e["part"].get("text", "") for e in events if e.get("type") == "text"]
    return texts[-1] if texts else ""


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


@dataclass
class ShellSteps(StepScript):
    """The fake model as an agent for opencode (``fakes.shell_steps``): each step is a
    ``bash`` call whose output comes back as a ``tool`` message. opencode's
    summarise request (its compaction) gets a summary naming the steps done; any
    other request without the ``bash`` tool (the title) a short title.
    """

    compactions: int = 0
    issued: list[int] = field(default_factory=list)  # the steps asked for, in order

    def __call__(self, body: dict[str, Any]) -> ScriptedReply:
        self.calls += 1
        messages = body.get("messages") or []
        done = [
            n
            for m in messages
            if m.get("role") != "system"
            for n in steps_done(_text(m.get("content")))
        ]
        # Told apart by the shell tool, not by tools at all: through the proxy a side
        # request carries the proxy's built-in tools.
        if "bash" not in {(t.get("function") or {}).get("name") for t in body.get("tools") or ()}:
            if SUMMARISE_REQUEST not in _text(messages[-1].get("content") if messages else ""):
                return ScriptedReply(text="Shell steps")
            self.compactions += 1
            marks = ", ".join(f"STEP-{n}-DONE" for n in sorted(set(done)))
            return ScriptedReply(text=f"## Objective\n- Run the shell steps.\n\nDone: {marks}.")
        step = self.next_step(done)
        if step is not None:
            self.issued.append(step)
        return self.step_reply(step, "bash")
