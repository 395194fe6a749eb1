"""The service as the client meets it: a real gunicorn (tests/live_server.py), one per test run.

On PostgreSQL the server shares the suite's test database (its rows are
committed: the tests are marked ``LIVE_DB``), and each test gets a fresh agent key there.
On SQLite the suite's test database lives in memory, out of the server's
reach: the server gets a SQLite file of its own, migrated and given a key by
``manage.py`` before it starts.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from django.db import connection

from sessions.services.keys import agent_key_create
from tests.live_server import ROOT, database_url, gunicorn

# Committed rows the server can read; the mark also makes pytest-django set the test
# database up (it only does so for tests that declare one).
LIVE_DB = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class LiveService:
    url: str  # http://127.0.0.1:PORT (the client adds /api/v1)
    key: str  # an agent key the server knows
    log: Path


@dataclass(frozen=True)
class _Server:
    url: str
    log: Path
    sqlite_key: str | None  # the key made in the server's own SQLite file


def _server_env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "LOG_LEVEL": "WARNING",
        "CONTEXTSVC_VAR_DIR": str(tmp / "var"),
        "CONTEXTSVC_SUMMARIZER": "offline",
        "ANTHROPIC_API_KEY": "",
        "PYTHONUNBUFFERED": "1",
        # Agents run hundreds of calls a minute here: no per-key limits.
        "CONTEXTSVC_RATE_LIMIT": "off",
        "CONTEXTSVC_RATE_LIMIT_MB": "off",
        "CONTEXTSVC_RATE_PACE": "off",
        "CONTEXTSVC_MAX_HEAVY_PER_KEY": "0",
        # No worker here: background runs go to a queue of their own, removed afterwards
        # (GET /context compacts in the request when the window is full).
        "CONTEXTSVC_COMPACTION_QUEUE": f"clients-{uuid.uuid4().hex[:8]}",
    }


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="session")
def _live_server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[_Server]:
    tmp = tmp_path_factory.mktemp("clients-live")
    env = _server_env(tmp)
    sqlite_key = None
    if connection.vendor == "postgresql":
        env["DATABASE_URL"] = database_url(application_name="contextsvc-clients")
    else:
        env["DATABASE_URL"] = f"sqlite:///{tmp / 'service.sqlite3'}"
        _manage(env, "migrate", "--noinput")
        sqlite_key = _manage(env, "create_agent_key", "client-tests").strip().splitlines()[-1]
    log = tmp / "gunicorn.log"
    try:
        with gunicorn(env, log) as port:
            yield _Server(f"http://127.0.0.1:{port}", log, sqlite_key)
    finally:
        if env.get("REDIS_URL"):
            client = redis.Redis.from_url(env["REDIS_URL"])
            queue = env["CONTEXTSVC_COMPACTION_QUEUE"]
            client.delete(queue, *client.scan_iter(match=f"_kombu.binding*{queue}"))


@pytest.fixture
def live_service(_live_server) -> LiveService:
    """The running service and a key for it (a new key per test on PostgreSQL)."""
    if _live_server.sqlite_key is not None:
        return LiveService(_live_server.url, _live_server.sqlite_key, _live_server.log)
    _, raw = agent_key_create(name="client-tests")
    return LiveService(_live_server.url, raw, _live_server.log)
