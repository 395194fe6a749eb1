"""OpenTelemetry: spans, the GenAI attributes, the token-usage metric and the compaction event.

The SDK's in-memory span exporter and metric reader stand in for OTLP; every
assertion compares with what the service itself stored or answered.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compaction.models import CompactionRun
from contextsvc import telemetry
from tests.conftest import tool_turn
from tests.otel import in_memory_otel, spans_named, token_points


@pytest.fixture
def otel():
    yield from in_memory_otel()


def test_off_by_default_spans_are_a_shared_no_op(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("CONTEXTSVC_OTEL", raising=False)
    telemetry.reset()
    assert telemetry.enabled() is False
    first = telemetry.span("x", {"a": 1})
    assert first is telemetry.span("y")
    with first as span:
        assert span is None


def test_env_turns_it_on(monkeypatch):
    monkeypatch.setenv("CONTEXTSVC_OTEL", "1")
    telemetry.reset()
    try:
        assert telemetry.enabled() is True
    finally:
        monkeypatch.delenv("CONTEXTSVC_OTEL")
        telemetry.reset()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    telemetry.reset()
    try:
        assert telemetry.enabled() is True
    finally:
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
        telemetry.reset()


def test_a_process_that_exports_nothing_never_loads_the_otlp_exporters():
    """They cost about half a second of every start (protobuf, requests)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CONTEXTSVC_OTEL"))}
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    code = (
        "import sys, django; django.setup(); import contextsvc.urls; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.exporter')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_on_the_exporters_are_made_for_the_process(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    telemetry.reset()
    try:
        state = telemetry._T.get()
        processors = state.tracer_provider._active_span_processor._span_processors
        assert [type(p).__name__ for p in processors] == ["BatchSpanProcessor"]
    finally:
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
        telemetry.reset()


@pytest.mark.django_db
def test_append_and_context_spans_carry_the_genai_attributes(otel, alice, make_session):
    spans, _ = otel
    sid = make_session(id="otel-a", provider="anthropic")["id"]
    appended = alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "list"}, *tool_turn("c1", "a\nb\n")]},
    ).json()
    (append,) = spans_named(spans, "contextsvc.append")
    attrs = append.attributes
    assert attrs["gen_ai.conversation.id"] == sid
    assert attrs["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert attrs["gen_ai.provider.name"] == "anthropic"
    assert attrs["gen_ai.operation.name"] == "contextsvc.append"
    assert attrs["contextsvc.messages"] == 3
    assert attrs["contextsvc.tokens_added"] == sum(m["token_count"] for m in appended["messages"])
    assert attrs["contextsvc.context.tokens"] == appended["budget"]["used"]

    body = alice.get(f"sessions/{sid}/context", format="openai").json()
    (context,) = spans_named(spans, "contextsvc.context")
    assert context.attributes["gen_ai.conversation.id"] == sid
    assert context.attributes["contextsvc.format"] == "openai"
    assert context.attributes["contextsvc.context.tokens"] == body["budget"]["used"]
    assert context.attributes["contextsvc.guard"] == body["budget"]["guard"]["status"]


@pytest.mark.django_db
def test_reported_usage_is_the_token_usage_metric(
    otel, alice, make_session, django_capture_on_commit_callbacks
):
    _, reader = otel
    sid = make_session(id="otel-u", provider="anthropic")["id"]
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]})
    usage = {
        "input_tokens": 120,
        "output_tokens": 30,
        "cache_read_tokens": 1000,
        "cache_creation_tokens": 50,
    }
    with django_capture_on_commit_callbacks(execute=True):
        assert alice.post(f"sessions/{sid}/usage", usage).status_code == 200
    points = {p.attributes["gen_ai.token.type"]: p for p in token_points(reader)}
    assert points["input"].sum == 1170 and points["input"].count == 1
    assert points["output"].sum == 30
    assert points["input"].attributes["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert points["input"].attributes["gen_ai.provider.name"] == "anthropic"


@pytest.mark.django_db
def test_a_compaction_run_is_a_span_with_the_compaction_event(otel, alice, make_session):
    spans, _ = otel
    sid = make_session(id="otel-c")["id"]
    for turn in range(4):
        alice.post(
            f"sessions/{sid}/messages",
            {"messages": [{"role": "user", "content": f"turn {turn} " * 50},
                          *tool_turn(f"c{turn}", "out\n" * 300),
                          {"role": "assistant", "content": "done " * 20}]},
        )  # fmt: skip
    result = alice.post(
        f"sessions/{sid}/compact",
        {"wait": True, "strategy": "drop_oldest_turns", "retain_last_turns": 1},
    ).json()
    run = CompactionRun.objects.get(pk=result["run_id"])
    (span,) = spans_named(spans, "contextsvc.compaction")
    assert span.attributes["gen_ai.conversation.id"] == sid
    assert span.attributes["contextsvc.compaction.run_id"] == str(run.pk)
    assert span.attributes["contextsvc.compaction.status"] == "succeeded"
    (event,) = [e for e in span.events if e.name == "contextsvc.compaction"]
    assert event.attributes["contextsvc.compaction.changed"] is True
    assert event.attributes["contextsvc.compaction.before_tokens"] == run.before_tokens
    assert event.attributes["contextsvc.compaction.after_tokens"] == run.after_tokens
    assert run.after_tokens < run.before_tokens
    assert list(event.attributes["contextsvc.compaction.strategies"]) == run.strategies_run
