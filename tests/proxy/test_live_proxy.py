"""The proxy as deployed (gunicorn + uvicorn worker, a separate process) driven by the official SDKs.

Needs PostgreSQL: the server shares the test database. Covers streaming and
non-streaming calls of both SDKs and a client that disconnects mid-stream
(what arrived is stored, marked incomplete).
"""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import openai
import pytest

from fakes.streams import ScriptedReply
from sessions.models import ContextCall, Message, Session, UsageReport
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY
from tests.proxy.server import live_proxy

pytestmark = [pytest.mark.needs_postgres, *PROXY_DB]


@pytest.fixture
def proxy(tmp_path, fake_anthropic, fake_openai):
    with live_proxy(
        tmp_path,
        CONTEXTSVC_UPSTREAM_ANTHROPIC_URL=fake_anthropic.base_url,
        CONTEXTSVC_UPSTREAM_OPENAI_URL=f"{fake_openai.base_url}/v1",
    ) as port:
        yield f"http://127.0.0.1:{port}"


def wait_for(query, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = query()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("not stored in time")


def test_anthropic_sdk_through_the_live_proxy(proxy, fake_anthropic, alice_key):
    claude = anthropic.Anthropic(
        base_url=f"{proxy}/proxy/anthropic",
        api_key=UPSTREAM_KEY,
        default_headers={"X-Contextsvc-Key": alice_key[1], "X-Contextsvc-Session": "ses_live1"},
        max_retries=0,
    )
    history = [{"role": "user", "content": "hello"}]
    first = claude.messages.create(model="claude-opus-4-5", max_tokens=200, messages=history)
    history += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "stream the next one"},
    ]
    with claude.messages.stream(model="claude-opus-4-5", max_tokens=200, messages=history) as s:
        text = "".join(s.text_stream)
    assert text
    roles = wait_for(
        lambda: (
            (
                r := list(
                    Message.objects.filter(session__external_id="ses_live1")
                    .order_by("seq")
                    .values_list("role", flat=True)
                )
            )
            == ["user", "assistant", "user", "assistant"]
            and r
        )
    )
    assert roles == ["user", "assistant", "user", "assistant"]
    assert UsageReport.objects.filter(session__external_id="ses_live1").count() == 2


def test_openai_sdk_streams_through_the_live_proxy(proxy, fake_openai, alice_key):
    gpt = openai.OpenAI(
        base_url=f"{proxy}/proxy/openai/v1",
        api_key=UPSTREAM_KEY,
        default_headers={"X-Contextsvc-Key": alice_key[1], "X-Contextsvc-Session": "ses_live2"},
        max_retries=0,
    )
    stream = gpt.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text
    wait_for(
        lambda: Message.objects.filter(session__external_id="ses_live2", role="assistant").exists()
    )


def test_a_client_disconnect_stores_what_arrived_marked_incomplete(
    proxy, fake_anthropic, alice_key
):
    fake_anthropic.stream_delay = 0.2
    fake_anthropic.script(ScriptedReply(text="word " * 200))
    body = {
        "model": "claude-opus-4-5",
        "max_tokens": 500,
        "stream": True,
        "messages": [{"role": "user", "content": "a long answer please"}],
    }
    headers = {
        "x-api-key": UPSTREAM_KEY,
        "x-contextsvc-key": alice_key[1],
        "x-contextsvc-session": "ses_live3",
        "anthropic-version": "2023-06-01",
    }
    received = b""
    with httpx.stream(
        "POST", f"{proxy}/proxy/anthropic/v1/messages", json=body, headers=headers, timeout=60
    ) as r:  # a loaded machine may take more than httpx's 5 s to the first byte
        assert r.status_code == 200
        for chunk in r.iter_raw():
            received += chunk
            if received.count(b"content_block_delta") >= 3:
                break  # the client goes away mid-stream
    stored = wait_for(
        lambda: Message.objects.filter(session__external_id="ses_live3", role="assistant").first()
    )
    assert "word" in json.dumps(stored.content)
    assert '"incomplete": true' in json.dumps(stored.parts)
    # docs/proxy.md#failed-calls: the call's record says the client closed the stream,
    # after how many events; the model did not fail, so it is not counted as failed.
    call = wait_for(
        lambda: ContextCall.objects.filter(
            session__external_id="ses_live3", client_status__isnull=False
        ).first()
    )
    assert (call.client_status, call.upstream_status, call.stream_cut) == (200, 200, True)
    assert call.error_type == "client_closed" and not call.failed
    assert call.stream_events and f"after {call.stream_events} events" in call.error_message
    assert Session.objects.get(external_id="ses_live3").failed_calls == 0
