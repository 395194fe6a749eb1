"""opencode (pinned, headless, offline) against the fake Chat Completions server.

The fake speaks what opencode sends — streamed Chat Completions with its
system prompt, its tools, ``bash`` calls run by opencode and their ``tool``
results — every request passed the fake's checks of what the real API
accepts, and opencode never reached for the npm registry. Its own compaction
near a small ``limit.context``: a summarise request of its own, then the
conversation restarts from the summary and carries on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fakes.openai_server import FakeOpenAI
from fakes.opencode import (
    CONTINUE_PROMPT,
    SUMMARISE_PROMPT,
    TITLE_PROMPT,
    ShellSteps,
    final_text,
    run_opencode,
)
from fakes.shell_steps import FINAL

pytestmark = [pytest.mark.needs_agents]

KEY = "test-key"
TASK = "Run the shell steps you are given, then report."


@contextmanager
def npm_registry_trap() -> Iterator[tuple[str, list[str]]]:
    """A registry URL that answers 404 to everything, and the paths asked of it."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            asked.append(self.path)
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", asked
    finally:
        server.shutdown()
        server.server_close()


def _system(body: dict) -> str:
    return str(body["messages"][0]["content"]) if body["messages"][0]["role"] == "system" else ""


def test_opencode_runs_its_bash_steps_against_the_fake(tmp_path):
    steps = 3
    agent = ShellSteps(steps=steps, lines=5)
    home = tmp_path / "home"
    with FakeOpenAI(api_key=KEY, agent=agent) as fake, npm_registry_trap() as (registry, asked):
        code, events, err = run_opencode(
            f"{fake.base_url}/v1", KEY, home, TASK, headers={"X-Extra": "sent"}, registry=registry
        )
        requests = fake.chat_requests()
    assert code == 0, err[-2000:]
    assert final_text(events) == FINAL
    assert [r.status for r in requests] == [200] * (steps + 2)  # the steps, the answer, a title
    # One run, one id: opencode's session id on every request, with the provider's headers.
    assert len({r.headers["x-session-id"] for r in requests}) == 1
    assert requests[0].headers["x-session-id"].startswith("ses_")
    assert all(r.headers["user-agent"].startswith("opencode/") for r in requests)
    assert all(r.headers["x-extra"] == "sent" for r in requests)
    assert all(r.body["stream"] is True for r in requests)
    # The title request goes alongside the first main call (either may arrive first):
    # no tools, a system prompt of its own, the task quoted in a user message.
    titles = [k for k, r in enumerate(requests) if not r.body.get("tools")]
    assert len(titles) == 1 and titles[0] in (0, 1)
    title = requests[titles[0]].body
    assert _system(title).startswith(TITLE_PROMPT)
    assert [m["role"] for m in title["messages"]] == ["system", "user", "user"]
    assert TASK in title["messages"][-1]["content"]
    # The main calls: opencode's tools, the bash results coming back in order.
    main = [r.body for k, r in enumerate(requests) if k not in titles]
    assert all("bash" in {t["function"]["name"] for t in b["tools"]} for b in main)
    # (Its prompt and tool set depend on the model's name: apply_patch for GPT models,
    # edit and write for others.)
    assert all(_system(b).lower().startswith("you are opencode") for b in main)
    results = [m["content"] for m in main[-1]["messages"] if m["role"] == "tool"]
    assert [f"STEP-{k}-DONE" in str(r) for k, r in enumerate(results)] == [True] * steps
    # Offline: the pre-made config folder kept it from installing its plugin package
    # (without it, opencode asks the registry for @opencode-ai/plugin in the background).
    assert asked == []


def test_opencode_compacts_by_itself_near_its_context_limit(tmp_path):
    steps = 8
    agent = ShellSteps(steps=steps, lines=1_000)  # ~1,200 fake tokens a step
    with FakeOpenAI(api_key=KEY, agent=agent) as fake:
        code, events, err = run_opencode(
            f"{fake.base_url}/v1",
            KEY,
            tmp_path / "home",
            TASK,
            context_limit=14_000,  # its tools and prompt alone are ~7,500
            output_limit=2_000,
        )
        requests = fake.chat_requests()
    assert code == 0, err[-2000:]
    assert final_text(events) == FINAL
    assert all(r.status == 200 for r in requests), [r.error for r in requests if r.error]
    assert agent.compactions >= 1
    # Its summarise request: no tools, its own system prompt, the history in one user message.
    summarise = [r.body for r in requests if _system(r.body).startswith(SUMMARISE_PROMPT)]
    assert len(summarise) == agent.compactions
    assert all(not b.get("tools") and len(b["messages"]) == 2 for b in summarise)
    # Then the main conversation restarts: "What did we do so far?", the summary, the
    # turns it kept, and its prompt to go on; the steps carry on from there.
    after = next(
        r.body for r in requests if CONTINUE_PROMPT in str(r.body["messages"][-1]["content"])
    )
    roles = [m["role"] for m in after["messages"]]
    assert roles[:3] == ["system", "user", "assistant"]
    assert after["messages"][1]["content"] == "What did we do so far?"
    assert "Done: STEP-0-DONE" in after["messages"][2]["content"]
    assert agent.issued == list(range(steps))  # each step once, none lost in a restart
