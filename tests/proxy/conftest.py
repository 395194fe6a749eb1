"""Fixtures for the proxy: fake upstreams, the proxy's settings pointed at them, and SDK clients.

``asgi_claude`` / ``asgi_gpt`` run the official SDKs' async clients against
the ASGI application in this process (the ASGI transport of httpx2, the SDKs' HTTP client; SQLite or
PostgreSQL); the live-server tests (``tests/proxy/server.py``) serve it with
gunicorn's uvicorn worker instead.
"""

from __future__ import annotations

import anthropic
import httpx2
import openai
import pytest

from contextsvc.asgi import application
from fakes.anthropic_server import FakeAnthropic
from fakes.gemini_server import FakeGemini
from fakes.openai_server import FakeOpenAI

UPSTREAM_KEY = "sk-upstream-test"

# The proxy works in threads of its own: its tests need committed data
# (transactional), and a transactional test's flush also empties the model
# profiles the migrations seed, so they are seeded again.
PROXY_DB = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("model_profiles")]


@pytest.fixture
def fake_anthropic():
    with FakeAnthropic(api_key=UPSTREAM_KEY) as fake:
        yield fake


@pytest.fixture
def fake_openai():
    with FakeOpenAI(api_key=UPSTREAM_KEY) as fake:
        yield fake


@pytest.fixture
def fake_gemini(settings):
    """The fake Gemini API, the proxy's Gemini upstream (pass-through credentials)."""
    with FakeGemini(api_key=UPSTREAM_KEY) as fake:
        settings.CONTEXTSVC_UPSTREAM_GEMINI_URL = fake.base_url
        settings.CONTEXTSVC_UPSTREAM_GEMINI_API_KEY = None
        yield fake


@pytest.fixture
def upstreams(settings, fake_anthropic, fake_openai):
    """The proxy forwards to the fakes (pass-through credentials unless a test sets keys)."""
    settings.CONTEXTSVC_UPSTREAM_ANTHROPIC_URL = fake_anthropic.base_url
    settings.CONTEXTSVC_UPSTREAM_OPENAI_URL = f"{fake_openai.base_url}/v1"
    settings.CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY = None
    settings.CONTEXTSVC_UPSTREAM_OPENAI_API_KEY = None
    return fake_anthropic, fake_openai


def asgi_http() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=application), timeout=30)


def asgi_claude(
    agent_key: str, *, session: str | None = None, **kwargs
) -> anthropic.AsyncAnthropic:
    """The anthropic SDK on the in-process proxy, pass-through credentials."""
    headers = {"X-Contextsvc-Key": agent_key}
    if session:
        headers["X-Contextsvc-Session"] = session
    return anthropic.AsyncAnthropic(
        base_url="http://localhost/proxy/anthropic",
        api_key=kwargs.pop("api_key", UPSTREAM_KEY),
        default_headers=headers,
        http_client=asgi_http(),
        max_retries=0,
        **kwargs,
    )


def asgi_gpt(agent_key: str, *, session: str | None = None, **kwargs) -> openai.AsyncOpenAI:
    """The openai SDK on the in-process proxy, pass-through credentials."""
    headers = {"X-Contextsvc-Key": agent_key}
    if session:
        headers["X-Contextsvc-Session"] = session
    return openai.AsyncOpenAI(
        base_url="http://localhost/proxy/openai/v1",
        api_key=kwargs.pop("api_key", UPSTREAM_KEY),
        default_headers=headers,
        http_client=asgi_http(),
        max_retries=0,
        **kwargs,
    )
