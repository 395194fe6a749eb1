"""README, "One agent turn, with curl": the walkthrough's commands, read from README.md
(never copied here), run by bash as a reader would paste them, against a live server.

The only change to the text is the port: the README says 127.0.0.1:8000 (``bin/run``'s
default), the test serves on a free port. ``bin/manage`` runs as written, on the same
database as the server (a SQLite file of this test). Each ``curl`` must answer 2xx, and
the key of step 1 must not be empty (issue 17: it was, silently, with the system Python).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live_server import ROOT, gunicorn

README = ROOT / "README.md"
SECTION = "## One agent turn, with curl"


def readme_block(heading: str, *, fence: str = "```sh") -> str:
    """The first ``fence`` code block after ``heading`` in README.md."""
    text = README.read_text()
    start = text.index(heading)
    body = text.index(fence, start) + len(fence)
    return text[body : text.index("```", body)].strip("\n")


def test_the_walkthrough_block_is_where_the_test_reads_it():
    block = readme_block(SECTION)
    assert block.startswith("# 1. A key for your agent")
    assert "bin/manage create_agent_key" in block and "python manage.py" not in block
    # A current model id (claude-sonnet-4-5 reaches end of life on 2026-11-30).
    assert "claude-sonnet-4-5" not in README.read_text()


@pytest.fixture
def server_env(tmp_path: Path) -> dict[str, str]:
    dropped = ("REDIS_URL", "DJANGO_SETTINGS_MODULE", "SECRET_KEY_FILE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'walkthrough.sqlite3'}",
        CONTEXTSVC_VAR_DIR=str(tmp_path / "var"),
        SECRET_KEY=secrets.token_urlsafe(50),
        CONTEXTSVC_PLAIN_HTTP="true",
        DEBUG="false",
        CONTEXTSVC_SUMMARIZER="offline",
        PYTHONUNBUFFERED="1",
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    return env


@pytest.mark.slow
def test_the_readme_walkthrough_runs_verbatim_against_a_live_server(server_env, tmp_path):
    block = readme_block(SECTION)
    with gunicorn(server_env, tmp_path / "gunicorn.log") as port:
        script = block.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        # Every curl also prints its status on a line of its own; the steps run as pasted.
        prologue = (
            "set -euo pipefail\ncurl() { command curl -w '\\n@@HTTP %{http_code}\\n' \"$@\"; }\n"
        )
        epilogue = '\nprintf "\\n@@KEY %s\\n" "$KEY"\n'
        done = subprocess.run(
            ["bash", "-c", prologue + script + epilogue],
            cwd=ROOT,
            env=server_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    out = done.stdout
    assert done.returncode == 0, done.stderr + out
    codes = [int(c) for c in re.findall(r"^@@HTTP (\d+)$", out, re.M)]
    assert len(codes) == block.count("curl -s"), out
    assert all(200 <= c < 300 for c in codes), out
    key = re.search(r"^@@KEY (.*)$", out, re.M).group(1)
    assert key.startswith("cx_"), out
    # Step 5 answered a provider request body with the budget; step 6 stored the turn.
    assert '"guard"' in out and '"seq"' in out
