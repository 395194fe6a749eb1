"""A session records where it came from: the proxy or the REST API, the client, its first ask."""

from __future__ import annotations

import anthropic
from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply
from sessions.models import Session
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = PROXY_DB


def test_a_proxied_session_names_the_proxy_its_sdk_and_first_user_message(upstreams, alice_key):
    fake, _ = upstreams
    fake.script(ScriptedReply(text="one"), ScriptedReply(text="two"))

    async def call():
        client = asgi_claude(alice_key[1], session="ses_origin1")
        first = [{"role": "user", "content": "Fix the flaky\n test in  api.py"}]
        await client.messages.create(model="claude-opus-4-5", max_tokens=64, messages=first)
        later = [
            *first,
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "and now the docs"},
        ]
        await client.messages.create(model="claude-opus-4-5", max_tokens=64, messages=later)

    async_to_sync(call)()
    session = Session.objects.get(external_id="ses_origin1")
    assert session.via == "proxy"
    assert session.client == f"Anthropic SDK Python {anthropic.__version__}"
    assert session.first_user_text == "Fix the flaky test in api.py"  # kept, not replaced


def test_a_rest_session_names_the_api_and_the_user_agent(alice):
    created = alice.post(
        "sessions", {"model": "claude-sonnet-4-5"}, headers={"User-Agent": "curl/8.5.0"}
    )
    assert created.status_code == 201
    sid = created.json()["id"]
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "system", "content": "s"}]})
    assert Session.objects.get(external_id=sid).first_user_text == ""
    alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "x" * 300}, {"role": "user", "content": "no"}]},
    )
    session = Session.objects.get(external_id=sid)
    assert (session.via, session.client) == ("api", "curl 8.5.0")
    assert session.first_user_text == "x" * 200
