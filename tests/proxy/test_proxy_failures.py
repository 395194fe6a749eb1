"""Failed model calls are recorded: upstream's status and error, a cut stream, the session's count."""

from __future__ import annotations

import anthropic
import openai
import pytest
from asgiref.sync import async_to_sync

from sessions.models import ContextCall, Session
from tests.proxy import responses_fixtures
from tests.proxy.conftest import PROXY_DB, asgi_claude, asgi_gpt
from tests.proxy.responses_fixtures import asgi_responses

pytestmark = PROXY_DB
fake_responses = responses_fixtures.fake_responses

MODEL = "claude-opus-4-5"
HI = [{"role": "user", "content": "hi"}]


def last_call(sid: str) -> ContextCall:
    return ContextCall.objects.filter(session__external_id=sid).latest("pk")


def claude(key: str, sid: str, *, stream: bool = False):
    async def call():
        client = asgi_claude(key, session=sid)
        if not stream:
            return await client.messages.create(model=MODEL, max_tokens=64, messages=HI)
        events = []
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as s:
            async for event in s:
                events.append(event.type)
        return events

    return async_to_sync(call)()


@pytest.mark.parametrize(
    "status,error,kind",
    [
        (529, anthropic.APIStatusError, "overloaded_error"),
        (500, anthropic.InternalServerError, "api_error"),
    ],
)
def test_an_upstream_error_is_recorded_as_a_failed_call(
    upstreams, alice_key, status, error, kind, caplog
):
    fake, _ = upstreams
    fake.fail_next(status, message="busy now")
    with pytest.raises(error) as raised:
        claude(alice_key[1], "ses_f1")
    assert raised.value.status_code == status  # the provider's error, as the provider shaped it
    assert raised.value.body["error"] == {"type": kind, "message": "busy now"}
    record = last_call("ses_f1")
    assert (record.upstream_status, record.client_status, record.failed) == (status, status, True)
    assert (record.error_type, record.error_message) == (kind, "busy now")
    assert record.retries == 0 and not record.stream_cut
    assert record.cost_usd == 0 and record.completed_at is None  # not priced as an answer
    assert record.ttfb_ms is not None and record.total_ms >= record.ttfb_ms
    assert Session.objects.get(external_id="ses_f1").failed_calls == 1
    assert f"upstream {status} {kind}: busy now" in caplog.text
    ours = [r.getMessage() for r in caplog.records if r.name == "django.request"]
    assert ours == []  # never logged as our own 500 or as "Unknown Status Code"


def test_a_call_that_completes_is_not_failed(upstreams, alice_key):
    claude(alice_key[1], "ses_f2")
    claude(alice_key[1], "ses_f2", stream=True)
    records = list(ContextCall.objects.filter(session__external_id="ses_f2").order_by("pk"))
    assert [(r.upstream_status, r.client_status, r.failed) for r in records] == [
        (200, 200, False),
        (200, 200, False),
    ]
    assert records[0].stream_events is None and records[1].stream_events > 3
    assert not records[1].stream_cut and records[1].ttfb_ms is not None
    assert Session.objects.get(external_id="ses_f2").failed_calls == 0


def test_a_cut_anthropic_stream_is_failed_with_its_event_count(upstreams, alice_key, caplog):
    fake, _ = upstreams
    fake.cut_stream_after = 3
    try:
        events = claude(alice_key[1], "ses_f3", stream=True)
    except anthropic.APIError:
        events = None
    assert events is None or "message_stop" not in events
    record = last_call("ses_f3")
    assert record.failed and record.stream_cut and record.stream_events == 3
    assert (record.upstream_status, record.client_status) == (200, 200)
    assert "stream cut after 3 events" in record.error_message
    assert record.completed_at is not None  # priced on the usage its events reported
    assert Session.objects.get(external_id="ses_f3").failed_calls == 1
    assert "stream cut after 3 events" in caplog.text


def gpt(key: str, sid: str, *, stream: bool = False):
    async def call():
        client = asgi_gpt(key, session=sid)
        if not stream:
            return await client.chat.completions.create(model="gpt-4o", messages=HI)
        chunks = await client.chat.completions.create(model="gpt-4o", messages=HI, stream=True)
        return [c async for c in chunks]

    return async_to_sync(call)()


def test_chat_completions_500_and_cut_stream_are_recorded(upstreams, alice_key):
    _, fake = upstreams
    fake.fail_next(500, message="boom")
    with pytest.raises(openai.InternalServerError) as raised:
        gpt(alice_key[1], "ses_f4")
    assert raised.value.body["message"] == "boom"  # the SDK reads OpenAI's error shape
    record = last_call("ses_f4")
    assert (record.upstream_status, record.failed, record.error_message) == (500, True, "boom")
    fake.cut_stream_after = 2
    try:
        gpt(alice_key[1], "ses_f4", stream=True)
    except openai.APIError:
        pass
    record = last_call("ses_f4")
    assert record.failed and record.stream_cut and record.stream_events == 2
    assert Session.objects.get(external_id="ses_f4").failed_calls == 2


def responses(key: str, sid: str, *, stream: bool = False):
    async def call():
        client = asgi_responses(key, session=sid)
        if not stream:
            return await client.responses.create(model="gpt-5", input="hi")
        events = await client.responses.create(model="gpt-5", input="hi", stream=True)
        return [e.type async for e in events]

    return async_to_sync(call)()


def test_responses_500_and_cut_stream_are_recorded(fake_responses, alice_key):
    fake_responses.fail_next(500)
    with pytest.raises(openai.InternalServerError):
        responses(alice_key[1], "ses_f5")
    record = last_call("ses_f5")
    assert (record.upstream_status, record.client_status, record.failed) == (500, 500, True)
    assert record.error_message == "fake failure 500"
    shown = responses(alice_key[1], "ses_f5", stream=True)
    assert "response.completed" in shown and not last_call("ses_f5").failed
    fake_responses.cut_stream_after = 2
    try:
        responses(alice_key[1], "ses_f5", stream=True)
    except openai.APIError:
        pass
    record = last_call("ses_f5")
    assert record.failed and record.stream_cut and record.stream_events == 2
    assert Session.objects.get(external_id="ses_f5").failed_calls == 2
