"""Smaller proxy behaviours: a later max_tokens reaches the session (the guard uses it)."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from sessions.models import Session
from tests.proxy.conftest import PROXY_DB, asgi_claude, asgi_gpt

pytestmark = PROXY_DB


def test_a_changed_max_tokens_updates_the_session_for_the_guard(upstreams, alice_key, alice):
    key = alice_key[1]
    history = [{"role": "user", "content": "hi"}]

    async def claude(max_tokens: int):
        client = asgi_claude(key, session="ses_mt_a")
        return await client.messages.create(
            model="claude-opus-4-5", max_tokens=max_tokens, messages=history
        )

    async_to_sync(claude)(1000)
    assert Session.objects.get(external_id="ses_mt_a").max_output_tokens == 1000
    before = alice.get("sessions/ses_mt_a/budget").json()
    async_to_sync(claude)(4000)
    assert Session.objects.get(external_id="ses_mt_a").max_output_tokens == 4000
    after = alice.get("sessions/ses_mt_a/budget").json()
    # The guard reserves the new output: its limit shrinks by the difference.
    assert after["guard"]["limit"] == before["guard"]["limit"] - 3000


def test_max_completion_tokens_of_a_later_openai_request_is_followed(upstreams, alice_key):
    key = alice_key[1]

    async def gpt(**limit):
        client = asgi_gpt(key, session="ses_mt_o")
        return await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], **limit
        )

    async_to_sync(gpt)(max_tokens=500)
    async_to_sync(gpt)(max_completion_tokens=700)
    assert Session.objects.get(external_id="ses_mt_o").max_output_tokens == 700
