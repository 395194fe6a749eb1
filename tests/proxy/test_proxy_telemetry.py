"""A proxied call as an OpenTelemetry GenAI client span, with the usage the provider reported."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply
from sessions.models import UsageReport
from tests.otel import in_memory_otel, spans_named, token_points
from tests.proxy.conftest import asgi_claude


@pytest.fixture
def otel():
    yield from in_memory_otel()


@pytest.mark.usefixtures("model_profiles")
@pytest.mark.django_db(transaction=True)
def test_a_proxied_call_is_a_genai_client_span_with_usage_and_cache_tokens(
    otel, upstreams, alice_key
):
    spans, reader = otel
    fake, _ = upstreams
    fake.script(ScriptedReply(text="one"), ScriptedReply(text="two"))
    system = [{"type": "text", "text": "You are terse. " * 2000}]

    async def calls():
        client = asgi_claude(alice_key[1], session="otel-p")
        await client.messages.create(
            model="claude-opus-4-5", max_tokens=256, system=system,
            messages=[{"role": "user", "content": "hi"}],
        )  # fmt: skip
        await client.messages.create(
            model="claude-opus-4-5", max_tokens=256, system=system, stream=False,
            messages=[{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "one"},
                      {"role": "user", "content": "again"}],
        )  # fmt: skip

    async_to_sync(calls)()
    chats = sorted(spans_named(spans, "chat claude-opus-4-5"), key=lambda s: s.start_time)
    reports = list(UsageReport.objects.filter(session__external_id="otel-p").order_by("id"))
    assert len(chats) == len(reports) == 2
    for span, report in zip(chats, reports, strict=True):
        attrs = span.attributes
        assert attrs["gen_ai.conversation.id"] == "otel-p"
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "anthropic"
        assert attrs["gen_ai.request.model"] == "claude-opus-4-5"
        assert attrs["gen_ai.response.model"] == "claude-opus-4-5"
        assert attrs["gen_ai.usage.input_tokens"] == report.input_tokens
        assert attrs["gen_ai.usage.output_tokens"] == report.output_tokens
        assert attrs["gen_ai.usage.cache_read.input_tokens"] == report.cache_read_tokens
        assert attrs["gen_ai.usage.cache_creation.input_tokens"] == report.cache_creation_tokens
        assert span.end_time > span.start_time
    # The fake caches the long system prompt: written on the first call, read on the second.
    assert reports[0].cache_creation_tokens > 0 and reports[1].cache_read_tokens > 0
    inputs = [p for p in token_points(reader) if p.attributes["gen_ai.token.type"] == "input"]
    assert sum(p.sum for p in inputs) == sum(
        r.input_tokens + r.cache_read_tokens + r.cache_creation_tokens for r in reports
    )
