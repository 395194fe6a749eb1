"""The OpenAPI contract, fuzzed: schemathesis against a real gunicorn for a bounded time.

Every operation of /api/v1/openapi.json is called with generated valid and
invalid input (schemathesis's examples, coverage and fuzzing phases, with
deterministic generation: the same cases every run). The run fails on any
5xx, any response whose status or body its operation does not declare, and
any response slower than 2 s; the failures are printed with a curl line that
reproduces each, and the server's tracebacks.

The server is a subprocess, so it needs committed rows (``transactional_db``)
on the same database by name: PostgreSQL's ``test_<name>`` (SQLite test
databases live in memory). Locally it skips without PostgreSQL; in CI
(``CI=true``) that is a failure.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis

from contextsvc.settings_env import env_int, env_str
from sessions.services.keys import agent_key_create
from tests.conftest import tool_turn
from tests.live_server import database_url, gunicorn

pytestmark = [pytest.mark.needs_postgres, pytest.mark.slow, pytest.mark.alone]

ROOT = Path(__file__).resolve().parents[1]
# The whole run, schema load to report; the bound is 3 minutes.
FUZZ_SECONDS = env_int("CONTEXTSVC_FUZZ_SECONDS")
EXAMPLES = env_int("CONTEXTSVC_FUZZ_EXAMPLES")
# The bound per response; the test runs with no other test beside it
# (the ``alone`` mark, tests/alone.py), so the bound measures the service.
MAX_RESPONSE_SECONDS = 2
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)


@contextmanager
def _forgotten(env: dict[str, str]) -> Iterator[None]:
    """Remove the run's compaction queue (and kombu's bindings) from Redis afterwards."""
    try:
        yield
    finally:
        if env.get("REDIS_URL"):
            client = redis.Redis.from_url(env["REDIS_URL"])
            queue = env["CONTEXTSVC_COMPACTION_QUEUE"]
            keys = [queue, *client.scan_iter(match=f"_kombu.binding*{queue}")]
            client.delete(*keys)


def _seed(base: str, raw_key: str) -> dict[str, list[str]]:
    """Sessions with sections, tools, messages, stored outputs, usage, a run and a snapshot."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    api = httpx.Client(
        base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {raw_key}"}, timeout=30
    )

    def call(method: str, path: str, **kw) -> dict:
        response = api.request(method, path, **kw)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json()

    sids, refs, runs, snapshots = [], [], [], ["uncompacted"]
    for i in range(3):
        sid = call("POST", "/sessions", json={"model": "claude-sonnet-4-5", "agent": f"fuzz{i}"})[
            "id"
        ]
        sids.append(sid)
        call("PUT", f"/sessions/{sid}/system", json=[{"name": "base", "content": "Be brief."}])
        tool = {"name": "bash", "description": "Run a command", "input_schema": {"type": "object"}}
        call("PUT", f"/sessions/{sid}/tools", json=[tool])
        for turn in range(4):
            output = "\n".join(f"line {n} of turn {turn}" for n in range(4000))
            messages = [
                {"role": "user", "content": f"turn {turn}: list the files"},
                *tool_turn(f"call{i}-{turn}", output),
                {"role": "assistant", "content": "Done.", "reasoning": "looked"},
            ]
            call("POST", f"/sessions/{sid}/messages", json={"messages": messages})
        call("POST", f"/sessions/{sid}/usage", json={"input_tokens": 900, "output_tokens": 20})
        upload = call(
            "PUT", f"/sessions/{sid}/outputs", content=b"a\nb\n", headers={"X-Tool-Name": "cat"}
        )
        refs.append(upload["ref"])
        refs.extend(o["ref"] for o in call("GET", f"/sessions/{sid}/outputs")["items"][:2])
        run = call(
            "POST",
            f"/sessions/{sid}/compact",
            json={"wait": True, "strategy": "drop_oldest_turns", "retain_last_turns": 1},
        )
        runs.append(run["run_id"])
        snapshots.extend(str(s["id"]) for s in call("GET", f"/sessions/{sid}/snapshots")["items"])
    names = [t["name"] for t in call("GET", "/tools")["anthropic"]]
    doomed = call("POST", "/sessions", json={"model": "claude-sonnet-4-5", "agent": "doomed"})
    return {
        "delete_sid": [doomed["id"]],
        "sid": sids,
        "ref": refs,
        "run_id": runs,
        "snapshot_id": snapshots,
        "name": names,
    }


def test_every_operation_keeps_its_contract_under_schemathesis(transactional_db, tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "LOG_LEVEL": "WARNING",
        "CONTEXTSVC_VAR_DIR": str(tmp_path / "var"),
        "CONTEXTSVC_SUMMARIZER": "offline",
        "ANTHROPIC_API_KEY": "",
        "PYTHONUNBUFFERED": "1",
        # One key sends every request: its rate limit would answer most of them 429.
        "CONTEXTSVC_RATE_LIMIT": "off",
        "CONTEXTSVC_RATE_LIMIT_MB": "off",
        "CONTEXTSVC_RATE_PACE": "off",
        "CONTEXTSVC_MAX_HEAVY_PER_KEY": "0",
        # Queued runs (no worker here) go to a queue of their own, removed afterwards.
        "CONTEXTSVC_COMPACTION_QUEUE": f"contract-fuzz-{uuid.uuid4().hex[:8]}",
    }
    _, raw_key = agent_key_create(name="fuzz")
    env["WEB_CONCURRENCY"] = "2"
    with gunicorn(env, tmp_path / "gunicorn.log") as port, _forgotten(env):
        base = f"http://127.0.0.1:{port}"
        ids = _seed(base, raw_key)
        command = [
            sys.executable, "-m", "schemathesis.cli", "run", f"{base}/api/v1/openapi.json",
            "--url", base,
            "--header", f"Authorization: Bearer {raw_key}",
            "--checks", ",".join(CHECKS),
            "--max-response-time", str(MAX_RESPONSE_SECONDS),
            "--phases", "examples,coverage,fuzzing",
            "--max-examples", str(EXAMPLES),
            "--max-time", str(FUZZ_SECONDS),
            "--generation-deterministic",
            "--no-shrink",
            "--workers", "1",
            "--request-timeout", "30",
            "--continue-on-failure",
            "--suppress-health-check", "all",
            "--output-sanitize", "false",
            "--no-color",
            # More options to look past a known failure, e.g. --generation-allow-x00 false.
            *(env_str("CONTEXTSVC_FUZZ_ARGS") or "").split(),
        ]  # fmt: skip
        started = time.monotonic()
        result = subprocess.run(
            command,
            # Its cache of past failures (.schemathesis/) stays out of the repository
            # and out of the next run: each run is the same cases.
            cwd=tmp_path,
            env={
                **env,
                "SCHEMATHESIS_HOOKS": "tests.contract_hooks",
                "CONTEXTSVC_FUZZ_IDS": json.dumps(ids),
                "PYTHONPATH": str(ROOT),
            },
            capture_output=True,
            text=True,
            timeout=FUZZ_SECONDS + 60,
        )
        elapsed = time.monotonic() - started
    report = result.stdout + result.stderr
    print(report)  # the figures (requests, operations, time) in the log either way
    server_log = (tmp_path / "gunicorn.log").read_text(errors="replace")
    assert result.returncode == 0, (
        f"schemathesis found contract failures in {elapsed:.0f} s "
        f"(each with a curl line that reproduces it):\n{report[-60_000:]}\n"
        f"--- the server's log (tracebacks of the 5xx) ---\n{server_log[-20_000:]}"
    )
