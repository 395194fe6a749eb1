"""Fixtures for the compaction tests.

No global eager mode (STYLE.md): tests call the services directly. Enqueueing
is recorded instead of sent, except in the tests marked ``needs_worker`` that
run a real worker. The offline summariser is the default; ``fake_anthropic`` and
``fake_openai`` point the official SDKs at a local fake Messages API and a
local fake Chat Completions server, ``fake_gemini`` the Gemini summariser at a
local fake Gemini API.
"""

from __future__ import annotations

from typing import Any

import pytest

from fakes.anthropic_server import FakeAnthropic
from fakes.gemini_server import FakeGemini
from fakes.openai_server import FakeOpenAI
from tests.conftest import tool_turn

# A small window so a handful of messages reaches the compaction tier:
# effective window 16,000 - 2,000 - 1,000 = 13,000; compact at 12,350.
SMALL = {
    "model": "claude-sonnet-4-5",
    "context_window": 16_000,
    "max_output_tokens": 2_000,
    "buffer_tokens": 1_000,
}
# These tests are about compaction: keep the tool-output trim
# (docs/concepts/trimming.md#budget-trim) out of the way with an explicit budget above what the
# small window can hold, and the insertion cap of views (view_share, 0.02 of the window by default)
# off.
NO_TRIM = {"tool_output_cache": {"context_budget_tokens": 20_000, "view_share": 1}}
LOG = "2026-11-22 12:00:00 INFO worker processed /srv/app/jobs/item.py ok\n" * 25


@pytest.fixture(autouse=True)
def _no_broker(request, monkeypatch, settings):
    """Record enqueues instead of talking to a broker; offline summariser."""
    settings.CONTEXTSVC_SUMMARIZER = "offline"
    settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY = None
    settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_BASE_URL = None
    settings.CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY = None
    settings.CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL = None
    settings.CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY = None
    settings.CONTEXTSVC_SUMMARIZER_GEMINI_BASE_URL = None
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    sent: list[tuple[str, str | None]] = []
    if request.node.get_closest_marker("needs_worker") is None:
        monkeypatch.setattr(
            "compaction.services.requests.enqueue_run",
            lambda run_id, task_id=None: sent.append((str(run_id), task_id)),
        )
    return sent


@pytest.fixture
def enqueued(_no_broker) -> list[tuple[str, str | None]]:
    return _no_broker


@pytest.fixture
def fake_anthropic(settings):
    """A local Messages API; the Anthropic summariser is selected and pointed at it."""
    with FakeAnthropic(api_key="test-key") as fake:
        settings.CONTEXTSVC_SUMMARIZER = "auto"
        settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY = "test-key"
        settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_BASE_URL = fake.base_url
        settings.CONTEXTSVC_SUMMARIZER_MAX_RETRIES = 1
        settings.CONTEXTSVC_SUMMARIZER_TIMEOUT = 10
        yield fake


def fake_summary(body: dict[str, Any]) -> str:
    """A summariser's answer in the shape the prompt asks for
    (docs/concepts/compaction.md#summary-request)."""
    last = body["messages"][-1]["content"]
    return (
        "<retain>\n- First request: kept verbatim\n</retain>\n"
        f"<summary>Fake summary of {len(body['messages'])} messages ({len(str(last))} chars asked)"
        "</summary>"
    )


@pytest.fixture
def fake_openai(settings):
    """A local Chat Completions server; the openai summariser is configured for it."""
    with FakeOpenAI(api_key="test-key", responder=fake_summary) as fake:
        settings.CONTEXTSVC_SUMMARIZER = "auto"
        settings.CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY = "test-key"
        settings.CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL = f"{fake.base_url}/v1"
        settings.CONTEXTSVC_SUMMARIZER_MAX_RETRIES = 1
        settings.CONTEXTSVC_SUMMARIZER_TIMEOUT = 10
        yield fake


@pytest.fixture
def fake_gemini(settings):
    """A local Gemini API; the gemini summariser is configured for it."""
    with FakeGemini(api_key="test-key") as fake:
        settings.CONTEXTSVC_SUMMARIZER = "auto"
        settings.CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY = "test-key"
        settings.CONTEXTSVC_SUMMARIZER_GEMINI_BASE_URL = fake.base_url
        settings.CONTEXTSVC_SUMMARIZER_GEMINI_MODEL = "gemini-fake-flash"
        settings.CONTEXTSVC_SUMMARIZER_MAX_RETRIES = 1
        settings.CONTEXTSVC_SUMMARIZER_TIMEOUT = 10
        yield fake


def turn(
    t: int, *, calls: int = 2, output: str = LOG, text_words: int = 300
) -> list[dict[str, Any]]:
    """One agent turn: a request, tool calls with results, a long final answer."""
    msgs: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": f"Turn {t}: please fix src/app/mod{t}.py; you must keep the tests green.",
        }
    ]
    for k in range(calls):
        msgs.extend(
            tool_turn(f"t{t}c{k}", f"ValueError: boom {t}.{k}\n{output}", command=f"pytest -k t{t}")
        )
    msgs.append(
        {
            "role": "assistant",
            "content": f"Turn {t} done: the fix is a guard. " + "detail " * text_words,
        }
    )
    return msgs


@pytest.fixture
def session_factory(alice_key, make_session):
    """A Session row (owned by alice) created through the API, with ``turns`` turns appended."""
    from sessions.models import Session
    from sessions.services.append import session_append_messages

    def _make(turns: int = 0, *, sid: str | None = None, **fields: Any) -> Session:
        body = {**SMALL, **fields}
        body["policy"] = {**NO_TRIM, **(fields.get("policy") or {})}
        if sid:
            body["id"] = sid
        data = make_session(**body)
        session = Session.objects.get(owner=alice_key[0], external_id=data["id"])
        for t in range(turns):
            session_append_messages(session=session, messages=turn(t))
        session.refresh_from_db()
        return session

    return _make
