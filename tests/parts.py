"""The parts of a set-up a test may need beyond Python (PostgreSQL, Redis, a
Celery worker, Chromium, the agent CLIs, docker-compose, the recorded agent
runs), whether this machine has them, and the run's account of what skipped.

A test declares a part with its marker (``needs_postgres`` ...; registered in
pyproject.toml). Where the part is missing the test skips with the part's one
reason, and the summary at the end counts the skips per reason and says how to
run them. In CI (CI=true) nothing skips: a test whose part is missing fails
before it starts, and any skip left (a ``pytest.skip`` in a test) fails too.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("true", "1")
AGENTS_WANTED = IN_CI or os.environ.get("CONTEXTSVC_AGENTS", "").lower() in ("1", "true")
AGENTS_BIN = Path(
    os.environ.get("CONTEXTSVC_AGENTS_BIN") or ROOT / "tests/agents/node_modules/.bin"
)
CHROMIUM = os.environ.get("CONTEXTSVC_CHROMIUM", "/usr/bin/chromium")
# The team's shared folder sits next to the checkout unless CONTEXTSVC_SHARED names it.
SHARED = Path(os.environ.get("CONTEXTSVC_SHARED") or ROOT.parent / "shared")
WORKLOADS = SHARED / "workloads" / "real"


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _redis() -> bool:
    return bool(os.environ.get("REDIS_URL"))


def _agents() -> bool:
    return AGENTS_WANTED and all(
        (AGENTS_BIN / name).exists() for name in ("claude", "codex", "gemini", "opencode")
    )


@dataclass(frozen=True)
class Part:
    marker: str
    reason: str  # why its tests skip: one line of the summary
    how: str  # how to run them
    present: Callable[[], bool]


PARTS = (
    Part(
        "needs_postgres",
        "needs PostgreSQL (the test database is SQLite)",
        "DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc bin/test",
        _postgres,
    ),
    Part(
        "needs_redis",
        "needs Redis (REDIS_URL is not set)",
        "REDIS_URL=redis://127.0.0.1:6379/0 bin/test",
        _redis,
    ),
    Part(
        "needs_worker",
        "starts a Celery worker (needs PostgreSQL and Redis)",
        "DATABASE_URL=postgres://... REDIS_URL=redis://... bin/test",
        lambda: _postgres() and _redis(),
    ),
    Part(
        "needs_chromium",
        f"needs Chromium (none at {CHROMIUM})",
        "apt-get install chromium, or CONTEXTSVC_CHROMIUM=/path/to/chromium bin/test",
        lambda: os.access(CHROMIUM, os.X_OK),
    ),
    Part(
        "needs_agents",
        "runs the agent CLIs (Claude Code, Codex, Gemini CLI, opencode)"
        + ("" if AGENTS_WANTED else ", not installed unless asked (~1.3 GB from npm)"),
        "bin/test --agents (npm ci in tests/agents once, then the tests)",
        _agents,
    ),
    Part(
        "needs_compose",
        "needs docker-compose (validates docker-compose.yml)",
        "apt-get install docker-compose, then bin/test",
        lambda: shutil.which("docker-compose") is not None,
    ),
    Part(
        "needs_workloads",
        f"needs the recorded agent runs (none at {WORKLOADS})",
        "CONTEXTSVC_SHARED=/path/to/shared bin/test",
        lambda: any(WORKLOADS.glob("*/*.jsonl")),
    ),
)
BY_REASON = {part.reason: part for part in PARTS}


@cache
def is_present(part: Part) -> bool:
    return part.present()


def missing_parts(item: pytest.Item) -> list[Part]:
    return [p for p in PARTS if item.get_closest_marker(p.marker) and not is_present(p)]


MISSING_IN_CI = pytest.StashKey[str]()


def apply(items: Iterable[pytest.Item]) -> None:
    """Skip (locally) the tests whose parts are missing; in CI mark them to fail."""
    for item in items:
        missing = missing_parts(item)
        if not missing:
            continue
        if IN_CI:
            item.stash[MISSING_IN_CI] = "; ".join(p.reason for p in missing)
        else:
            item.add_marker(pytest.mark.skip(reason=missing[0].reason))


def refuse_in_ci(item: pytest.Item) -> None:
    """Fail, before it starts, a CI test whose part this machine lacks."""
    if reason := item.stash.get(MISSING_IN_CI, None):
        pytest.fail(f"CI=true and this machine lacks what the test needs: {reason}", pytrace=False)


def skip_reason(report: pytest.TestReport) -> str:
    """The reason pytest gives for a skip, without its file:line prefix."""
    reason = (
        report.longrepr[2] if isinstance(report.longrepr, (tuple, list)) else str(report.longrepr)
    )
    return reason.removeprefix("Skipped: ")


def summary_lines(reports: Iterable[pytest.TestReport]) -> list[str]:
    """One line per skip reason with its count, and how to run those tests."""
    counts = Counter(skip_reason(r) for r in reports)
    lines = []
    for reason, count in counts.most_common():
        part = BY_REASON.get(reason)
        how = f"; to run them: {part.how}" if part else ""
        lines.append(f"{count:5d} skipped: {reason}{how}")
    return lines
