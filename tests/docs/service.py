"""The service the doc examples run against: ``bin/run`` itself, on fake provider APIs.

``bin/run`` is started as the README says (migrate + demo data, the web
server, a real Celery worker, the drop-in proxy) with only what a test must
change: free ports (``PORT``, ``CONTEXTSVC_PROXY_PORT``), a scratch
``CONTEXTSVC_VAR_DIR`` and SQLite file (also in CI: a reader's ``bin/run`` uses
SQLite), and the proxy's upstreams pointed at the suite's fake Messages,
Responses and Gemini servers. What it prints (the ``export CONTEXTSVC_KEY=…`` line, the
operator login) is read back and checked.

The blocks see the environment a reader has after ``bin/run``: its
``CONTEXTSVC_KEY`` (a fresh agent key per page, so each page's session ids are
its own), ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY`` / ``GEMINI_API_KEY`` (keys
the fakes accept: pass-through credentials), ``OPENAI_BASE_URL`` (the fake Responses API, for the
Agents SDK used without the proxy), a scratch ``HOME``, and the pinned agent CLIs
(``tests/agents``) on ``PATH``. Their working directory is a scratch copy of
the checkout's top level (symlinks; ``bin/*`` are one-line shims to the real
scripts), so a file an example writes lands there, not in the repository.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fakes.anthropic_server import FakeAnthropic
from fakes.claude_code import BashAgent
from fakes.gemini_cli import ShellSteps
from fakes.gemini_server import FakeGemini
from fakes.responses_server import FakeResponses
from tests.live_server import ROOT, free_port

PROVIDER_KEY = "sk-docs-examples-provider-key"
# What the doc pages write; the blocks run with the test's ports instead.
DOC_PORT, DOC_PROXY_PORT = 8000, 8001
_DROPPED = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY_FILE", "CONTEXTSVC_COMPACTION_QUEUE", "CI_")
START_TIMEOUT = 240  # seconds: a first start at a loaded machine (README: 15–26 s on 2 idle cores)


@dataclass
class Service:
    port: int
    proxy_port: int
    demo_key: str
    login: tuple[str, str]
    env: dict[str, str]  # what every block runs with (CONTEXTSVC_KEY set per page)
    workdir: Path
    log: Path
    anthropic: FakeAnthropic
    responses: FakeResponses
    gemini: FakeGemini
    page_keys: dict[str, str] = field(default_factory=dict)

    def localize(self, text: str) -> str:
        """A block's text with the test's ports for the documented ones."""
        text = text.replace(f"127.0.0.1:{DOC_PORT}", f"127.0.0.1:{self.port}")
        return text.replace(f"127.0.0.1:{DOC_PROXY_PORT}", f"127.0.0.1:{self.proxy_port}")

    def page_env(self, page: str) -> dict[str, str]:
        return {**self.env, "CONTEXTSVC_KEY": self.page_keys[page]}


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _scratch_checkout(work: Path) -> None:
    """The checkout's top level as symlinks, ``bin/*`` as shims (module doc)."""
    work.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in ("bin", "var", ".git"):
            (work / entry.name).symlink_to(entry)
    (work / "bin").mkdir()
    for script in (ROOT / "bin").iterdir():
        shim = work / "bin" / script.name
        shim.write_text(f'#!/usr/bin/env bash\nexec {script} "$@"\n')
        shim.chmod(0o755)


def _server_env(
    tmp: Path, port: int, proxy_port: int, fakes: tuple[str, str, str]
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED)}
    env.update(
        HOST="127.0.0.1",
        PORT=str(port),
        CONTEXTSVC_PROXY_PORT=str(proxy_port),
        CONTEXTSVC_VAR_DIR=str(tmp / "var"),
        DATABASE_URL=f"sqlite:///{tmp / 'var' / 'contextsvc.sqlite3'}",
        CONTEXTSVC_UPSTREAM_ANTHROPIC_URL=fakes[0],
        CONTEXTSVC_UPSTREAM_OPENAI_URL=fakes[1],
        CONTEXTSVC_UPSTREAM_GEMINI_URL=fakes[2],
        ANTHROPIC_API_KEY="",
        OPENAI_API_KEY="",
        PYTHONUNBUFFERED="1",
    )
    env.pop("CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY", None)
    env.pop("CONTEXTSVC_UPSTREAM_OPENAI_API_KEY", None)
    env.pop("CONTEXTSVC_UPSTREAM_GEMINI_API_KEY", None)
    return env


def _block_env(server_env: dict[str, str], tmp: Path, responses_url: str) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir()
    agents_bin = ROOT / "tests" / "agents" / "node_modules" / ".bin"
    return {
        **server_env,
        "HOME": str(home),
        "PATH": f"{agents_bin}:{server_env.get('PATH', '/usr/bin:/bin')}",
        "ANTHROPIC_API_KEY": PROVIDER_KEY,
        "OPENAI_API_KEY": PROVIDER_KEY,
        "GEMINI_API_KEY": PROVIDER_KEY,
        "OPENAI_BASE_URL": responses_url,
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        # Claude Code offline: no updater, no telemetry, nothing but the API calls.
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
    }


class _Output:
    """bin/run's output, read as it comes, kept in a list and a log file."""

    def __init__(self, stream, log: Path) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream, log), daemon=True)
        self._thread.start()

    def _read(self, stream, log: Path) -> None:
        with log.open("a") as out:
            for line in stream:
                self.lines.append(line.rstrip("\n"))
                out.write(line)
                out.flush()

    def find(self, pattern: str) -> re.Match[str] | None:
        for line in self.lines:
            match = re.search(pattern, line)
            if match:
                return match
        return None


def _wait_started(run: subprocess.Popen, output: _Output, ports: tuple[int, int], log: Path):
    deadline = time.monotonic() + START_TIMEOUT
    while not (output.find(r"^\s*try\s+curl ") and all(_accepts(p) for p in ports)):
        if run.poll() is not None:
            raise AssertionError(f"bin/run exited ({run.returncode}):\n{log.read_text()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"bin/run did not start in {START_TIMEOUT} s:\n{log.read_text()}")
        time.sleep(0.2)


def _stop(run: subprocess.Popen) -> None:
    """Ctrl-C's path (bin/run's trap stops its three processes), then its group if need be."""
    if run.poll() is None:
        run.send_signal(signal.SIGTERM)
        try:
            run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(
            run.pid, signal.SIGKILL
        )  # its own group (start_new_session): only what it started
    except ProcessLookupError:
        pass
    run.wait(timeout=10)


def make_keys(env: dict[str, str], names: list[str]) -> list[str]:
    """One agent key per name, made in one process (``create_agent_key`` for each)."""
    code = (
        "import sys\nfrom sessions.services.keys import agent_key_create\n"
        "for name in sys.argv[1:]:\n    print(agent_key_create(name=name)[1])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup()\n{code}", *names],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "contextsvc.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    keys = done.stdout.split()
    assert len(keys) == len(names) and all(k.startswith("cx_") for k in keys), done.stdout
    return keys


@contextmanager
def bin_run(tmp: Path, page_names: list[str]) -> Iterator[Service]:
    """``bin/run`` on free ports and the fakes (module doc), stopped afterwards."""
    with ExitStack() as stack:
        anthropic = stack.enter_context(FakeAnthropic(api_key=PROVIDER_KEY))
        anthropic.agent = BashAgent(steps=3, lines=200)
        responses = stack.enter_context(FakeResponses(api_key=PROVIDER_KEY))
        gemini = stack.enter_context(FakeGemini(api_key=PROVIDER_KEY))
        gemini.agent = ShellSteps(steps=3, lines=200)
        port, proxy_port = free_port(), free_port()
        responses_url = f"{responses.base_url}/v1"
        fakes = (anthropic.base_url, responses_url, gemini.base_url)
        env = _server_env(tmp, port, proxy_port, fakes)
        log = tmp / "bin-run.log"
        run = subprocess.Popen(
            ["bash", str(ROOT / "bin" / "run")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        stack.callback(_stop, run)
        output = _Output(run.stdout, log)
        _wait_started(run, output, (port, proxy_port), log)
        exported = output.find(r"^\s*export CONTEXTSVC_KEY=(cx_\S+)$")
        login = output.find(r"login: (\S+) / (\S+)$")
        assert exported and login, (
            f"bin/run did not print the key and the login:\n{log.read_text()}"
        )
        work = tmp / "checkout"
        _scratch_checkout(work)
        service = Service(
            port=port,
            proxy_port=proxy_port,
            demo_key=exported.group(1),
            login=(login.group(1), login.group(2)),
            env=_block_env(env, tmp, responses_url),
            workdir=work,
            log=log,
            anthropic=anthropic,
            responses=responses,
            gemini=gemini,
        )
        service.page_keys = dict(zip(page_names, make_keys(env, page_names), strict=True))
        yield service
