"""Per-key rate limits on the proxy: a proxied call counts against the agent key's budget;
over it, a 429 in the provider's shape with ``retry-after`` (its SDK raises RateLimitError)."""

from __future__ import annotations

import anthropic
import openai
import pytest
from asgiref.sync import async_to_sync

from sessions.models import Message
from tests.proxy.conftest import PROXY_DB, asgi_claude, asgi_gpt

pytestmark = PROXY_DB


def _stored(sid: str) -> int:
    return Message.objects.filter(session__external_id=sid).count()


def test_anthropic_calls_over_the_key_rate_get_a_provider_429(upstreams, alice_key, settings):
    settings.CONTEXTSVC_RATE_LIMIT = "2/minute"
    key = alice_key[1]

    async def call(text: str):
        client = asgi_claude(key, session="ses_rl_a")
        return await client.messages.with_raw_response.create(
            model="claude-opus-4-5", max_tokens=64, messages=[{"role": "user", "content": text}]
        )

    async_to_sync(call)("one")
    async_to_sync(call)("one")  # a retry of the same: counted all the same
    before = _stored("ses_rl_a")
    with pytest.raises(anthropic.RateLimitError) as caught:
        async_to_sync(call)("two")
    response = caught.value.response
    assert response.status_code == 429
    assert 1 <= int(response.headers["retry-after"]) <= 60
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    assert "Too many requests" in body["error"]["message"]
    assert _stored("ses_rl_a") == before  # the refused call stored nothing


def test_openai_calls_share_the_key_budget_with_the_rest_api(upstreams, alice_key, alice, settings):
    settings.CONTEXTSVC_RATE_LIMIT = "2/minute"
    key = alice_key[1]

    async def call():
        client = asgi_gpt(key, session="ses_rl_o")
        return await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )

    async_to_sync(call)()
    # The REST API spends the same key's budget: its next proxied call is refused.
    assert alice.get("sessions/ses_rl_o/budget").status_code == 200
    with pytest.raises(openai.RateLimitError) as caught:
        async_to_sync(call)()
    response = caught.value.response
    assert 1 <= int(response.headers["retry-after"]) <= 60
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Too many requests" in error["message"]
