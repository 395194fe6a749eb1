"""Fixtures for the Responses route: the fake Responses upstream and the SDK on the in-process proxy."""

from __future__ import annotations

import openai
import pytest

from fakes.responses_server import FakeResponses
from tests.proxy.conftest import UPSTREAM_KEY, asgi_http


@pytest.fixture
def fake_responses(settings):
    """The proxy's OpenAI upstream is a fake Responses API (pass-through credentials)."""
    with FakeResponses(api_key=UPSTREAM_KEY) as fake:
        settings.CONTEXTSVC_UPSTREAM_OPENAI_URL = f"{fake.base_url}/v1"
        settings.CONTEXTSVC_UPSTREAM_OPENAI_API_KEY = None
        yield fake


def asgi_responses(
    agent_key: str, *, session: str | None = None, headers: dict[str, str] | None = None, **kwargs
) -> openai.AsyncOpenAI:
    """The openai SDK on the in-process proxy (pass-through credentials unless ``api_key``)."""
    default = {"X-Contextsvc-Key": agent_key, **(headers or {})}
    if session:
        default["X-Contextsvc-Session"] = session
    return openai.AsyncOpenAI(
        base_url="http://localhost/proxy/openai/v1",
        api_key=kwargs.pop("api_key", UPSTREAM_KEY),
        default_headers=default,
        http_client=asgi_http(),
        max_retries=0,
        **kwargs,
    )
