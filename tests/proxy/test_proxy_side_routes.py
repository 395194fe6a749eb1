"""count_tokens counts what the proxy would send; the model lists pass through."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from sessions.models import Message
from tests.proxy.conftest import PROXY_DB, asgi_claude, asgi_gpt

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"


def test_count_tokens_counts_the_managed_body_and_stores_nothing(upstreams, alice_key):
    fake, _ = upstreams
    key = alice_key[1]

    async def calls():
        client = asgi_claude(key, session="ses_ct")
        history = [{"role": "user", "content": "first " * 50}]
        reply = await client.messages.create(model=MODEL, max_tokens=100, messages=history)
        history += [
            {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
            {"role": "user", "content": "a candidate next message"},
        ]
        counted = await client.messages.count_tokens(model=MODEL, messages=history)
        return counted

    counted = async_to_sync(calls)()
    assert counted.input_tokens > 0
    sent = fake.requests[-1]
    assert sent.path == "/v1/messages/count_tokens"
    texts = str(sent.body["messages"])
    assert "a candidate next message" in texts and "first first" in texts
    assert "max_tokens" not in sent.body
    # Counting is a read: the candidate message is not in the transcript.
    assert Message.objects.filter(session__external_id="ses_ct").count() == 2


def test_model_lists_pass_through(upstreams, alice_key):
    async def lists():
        claude_models = await asgi_claude(alice_key[1]).models.list()
        gpt_models = await asgi_gpt(alice_key[1]).models.list()
        return [m.id async for m in claude_models], [m.id async for m in gpt_models]

    claude_ids, gpt_ids = async_to_sync(lists)()
    assert "claude-fake-large" in claude_ids
    assert gpt_ids
