"""The proxy's request gate, fuzzed: hostile mutations of valid bodies on its three endpoints.

Each case is a valid body with mutations (``fuzz_bodies``), sent to the ASGI
app in this process with the fake upstreams behind it. Whatever the body,
the answer is never a 5xx; a refusal (no session header: nothing was
forwarded) is the provider's error shape naming a field, and no row was
written (sessions, messages, usage, tool outputs, client views, stored
responses counted before and after). Generation is deterministic, so CI runs
the same cases every time; CONTEXTSVC_PROXY_FUZZ_EXAMPLES scales the run
(the default in CI, 2,000 per endpoint, gives 6,000 cases, which fits the CI time limit;
`CONTEXTSVC_PROXY_FUZZ_EXAMPLES=6700` runs 20,100; 700 elsewhere).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import httpx2
import pytest
from django.core.handlers.asgi import ASGIHandler
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextsvc import settings_proxy
from proxy.gate import limit_bodies
from proxy.models import ClientView, StoredResponse
from sessions.models import ContextCall, Message, Session, ToolOutput, UsageReport
from tests.conftest import IN_CI
from tests.proxy import fuzz_bodies as fb
from tests.proxy import responses_fixtures
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY

pytestmark = [*PROXY_DB, pytest.mark.slow]  # thousands of cases: handed out first
fake_responses = responses_fixtures.fake_responses

# CI runs 6,000 cases (a refusal ~5 ms, a forwarded call ~20 ms); elsewhere 2,100,
# so a newcomer's bin/test stays short.
EXAMPLES = int(os.environ.get("CONTEXTSVC_PROXY_FUZZ_EXAMPLES") or (2000 if IN_CI else 700))
# The fuzz's body limit: small, so "past the limit" costs little per case.
LIMIT = 64 * 1024
MODELS = (Session, Message, UsageReport, ToolOutput, ClientView, StoredResponse, ContextCall)
COUNT_SQL = "SELECT " + ", ".join(f"(SELECT count(*) FROM {m._meta.db_table})" for m in MODELS)

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)


def _rows() -> tuple[int, ...]:
    with connection.cursor() as cursor:
        cursor.execute(COUNT_SQL)
        return tuple(cursor.fetchone())


class Runner:
    """Sends cases on one event loop and one client; tallies what came back."""

    def __init__(self, agent_key: str, app: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), timeout=30)
        self.headers = {
            "X-Contextsvc-Key": agent_key,
            "x-api-key": UPSTREAM_KEY,
            "Authorization": f"Bearer {UPSTREAM_KEY}",
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        }
        self.cases = 0
        self.rows: tuple[int, ...] | None = None  # counted after the last refusal
        self.statuses: dict[int, int] = {}
        self.started = time.perf_counter()

    def send(self, path: str, raw: bytes) -> httpx2.Response:
        url = f"http://localhost/proxy/{path}"
        response = self.loop.run_until_complete(
            self.client.post(url, content=raw, headers=self.headers)
        )
        self.cases += 1
        self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
        return response

    def close(self, name: str) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()
        seconds = time.perf_counter() - self.started
        print(f"\n{name}: {self.cases} cases in {seconds:.1f} s, statuses {self.statuses}")


def check(runner: Runner, path: str, raw: bytes, dialect: str) -> None:
    # The rows as the last refusal left them (they were counted then): counted
    # again only after a forwarded call, which writes.
    before = runner.rows if runner.rows is not None else _rows()
    response = runner.send(path, raw)
    assert response.status_code < 500, (raw[:600], response.text[:600])
    if response.status_code < 400 or "x-contextsvc-session" in response.headers:
        runner.rows = None
        return  # forwarded: what upstream said is relayed
    body = response.json()
    if dialect == "anthropic":
        assert body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}, body
        assert body["error"]["type"] == "invalid_request_error" or response.status_code != 400
        named = body["error"]["message"].split(":", 1)[0]
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        named = body["error"]["param"]
    if response.status_code in (400, 413):
        assert named, body  # the field refused
    runner.rows = _rows()
    assert runner.rows == before, (raw[:600], body)


@st.composite
def sized(draw: Any, seed: dict[str, Any]) -> bytes:
    body = draw(fb.mutated(seed))
    how = draw(fb.ENCODINGS)
    raw = fb.encode(body, how)
    if draw(st.integers(0, 40)) == 0:  # past the limit, or just under it
        pad = LIMIT - len(raw) + draw(st.sampled_from([-64, 1, 4096]))
        raw = raw[:-1] + b', "pad": "' + b"p" * max(0, pad) + b'"}' if raw.endswith(b"}") else raw
    return raw


@pytest.fixture
def small_limit(settings):
    settings.CONTEXTSVC_MAX_JSON_BODY = LIMIT


@pytest.fixture
def proxy_app(settings):
    """The application as the proxy process serves it: its narrowed settings (only
    /proxy/, the all-async middleware) and the body limit in front."""
    settings.ROOT_URLCONF = settings_proxy.ROOT_URLCONF
    settings.MIDDLEWARE = settings_proxy.MIDDLEWARE
    return limit_bodies(ASGIHandler())


@pytest.fixture
def runner(alice_key, proxy_app):
    # Thousands of refusals: one log line each would be most of a case's time.
    logging.disable(logging.WARNING)
    runner = Runner(alice_key[1], proxy_app)
    try:
        yield runner
    finally:
        logging.disable(logging.NOTSET)
        runner.close("fuzz")


def test_proxy_fuzz_anthropic_messages_and_count_tokens(upstreams, small_limit, runner):
    @FUZZ
    @given(raw=sized(fb.ANTHROPIC), count=st.integers(0, 4))
    def case(raw: bytes, count: int) -> None:
        path = "anthropic/v1/messages/count_tokens" if count == 0 else "anthropic/v1/messages"
        check(runner, path, raw, "anthropic")

    case()
    assert runner.cases >= EXAMPLES


def test_proxy_fuzz_openai_chat_completions(upstreams, small_limit, runner):
    @FUZZ
    @given(raw=sized(fb.CHAT))
    def case(raw: bytes) -> None:
        check(runner, "openai/v1/chat/completions", raw, "openai")

    case()
    assert runner.cases >= EXAMPLES


def test_proxy_fuzz_openai_responses(fake_responses, small_limit, runner):
    @FUZZ
    @given(raw=sized(fb.RESPONSES))
    def case(raw: bytes) -> None:
        check(runner, "openai/v1/responses", raw, "openai")

    case()
    assert runner.cases >= EXAMPLES
