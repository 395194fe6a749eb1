"""OpenTelemetry: spans for appends, context builds, proxy calls and compaction runs, and the
``gen_ai.client.token.usage`` metric, with the GenAI semantic-convention attributes.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set or ``CONTEXTSVC_OTEL=1``; then
spans and metrics go out over OTLP/HTTP, configured by the standard variables
(``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``_HEADERS`` / ``_TIMEOUT`` and their
per-signal forms, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_METRIC_EXPORT_INTERVAL``), which the SDK's exporters read themselves.

Off costs one attribute read per instrumented call: ``span`` hands back a
shared no-op context manager and the callers build no attributes. The
providers are made on first use in each process, so gunicorn and Celery
workers forked after import each export from their own threads. Tests install
the SDK's in-memory exporter and reader with ``configure``.

Instrumentation stays out of ``contextsvc.engine`` (pure); the services call
the helpers here.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from contextsvc.settings_env import env_bool, env_str

SCOPE = "contextsvc"
# GenAI semantic conventions (attribute and metric names as the spec writes them).
CONVERSATION_ID = "gen_ai.conversation.id"
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE = "gen_ai.token.type"
TOKEN_USAGE_METRIC = "gen_ai.client.token.usage"
# The buckets the GenAI conventions advise for token counts.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
COMPACTION_EVENT = "contextsvc.compaction"


_OTLP_MODULE = "contextsvc.telemetry_otlp"


def _wanted() -> bool:
    return bool(env_str("OTEL_EXPORTER_OTLP_ENDPOINT")) or env_bool("CONTEXTSVC_OTEL")


@dataclass(slots=True)
class _State:
    tracer: Tracer
    tokens: Any  # the gen_ai.client.token.usage histogram
    tracer_provider: TracerProvider
    meter_provider: MeterProvider


class _Telemetry:
    """Whether telemetry is on, and (once made) the tracer and the token histogram."""

    def __init__(self) -> None:
        self.on = _wanted()
        self.state: _State | None = None
        self.pid = 0
        self.lock = threading.Lock()

    def get(self) -> _State:
        state = self.state
        if state is not None and self.pid == os.getpid():
            return state
        with self.lock:
            if self.state is None or self.pid != os.getpid():
                resource = Resource.create({"service.name": "contextsvc"})
                tracer_provider = TracerProvider(resource=resource)
                # Loaded here, not at import: most processes never export.
                otlp = importlib.import_module(_OTLP_MODULE)
                tracer_provider.add_span_processor(otlp.span_processor())
                reader = otlp.metric_reader()
                meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
                self._install(tracer_provider, meter_provider)
            assert self.state is not None
            return self.state

    def _install(self, tracer_provider: TracerProvider, meter_provider: MeterProvider) -> None:
        meter = meter_provider.get_meter(SCOPE)
        tokens = meter.create_histogram(
            TOKEN_USAGE_METRIC,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )
        self.state = _State(
            tracer=tracer_provider.get_tracer(SCOPE),
            tokens=tokens,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )
        self.pid = os.getpid()


_T = _Telemetry()


def enabled() -> bool:
    return _T.on


def configure(
    *, span_processor: SpanProcessor | None = None, metric_reader: MetricReader | None = None
) -> None:
    """Turn telemetry on with these (the SDK's in-memory ones in tests); ``reset`` undoes it."""
    resource = Resource.create({"service.name": "contextsvc"})
    tracer_provider = TracerProvider(resource=resource)
    if span_processor is not None:
        tracer_provider.add_span_processor(span_processor)
    readers = [metric_reader] if metric_reader is not None else []
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    with _T.lock:
        _T._install(tracer_provider, meter_provider)
        _T.on = True


def reset() -> None:
    """Back to what the environment says (tests)."""
    with _T.lock:
        state, _T.state = _T.state, None
        _T.on = _wanted()
    if state is not None:
        state.tracer_provider.shutdown()
        state.meter_provider.shutdown()


class _NoSpan:
    """The shared context manager of ``span`` when telemetry is off."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def span(
    name: str, attributes: Mapping[str, Any] | None = None, *, kind: SpanKind = SpanKind.INTERNAL
) -> Any:
    """A span around a block (the span, or None when telemetry is off).

    Callers with attributes that cost something to compute check ``enabled()``
    first, or set them on the span they get.
    """
    if not _T.on:
        return _NO_SPAN
    return _span(name, attributes, kind)


@contextmanager
def _span(name: str, attributes: Mapping[str, Any] | None, kind: SpanKind) -> Iterator[Span]:
    with _T.get().tracer.start_as_current_span(
        name, kind=kind, attributes=_clean(attributes)
    ) as current:
        yield current


def record_span(
    name: str,
    attributes: Mapping[str, Any],
    *,
    start_ns: int | None = None,
    kind: SpanKind = SpanKind.CLIENT,
    error: str | None = None,
) -> None:
    """A finished span from ``start_ns`` to now (a proxied call that ended in another task)."""
    if not _T.on:
        return
    current = _T.get().tracer.start_span(
        name, kind=kind, attributes=_clean(attributes), start_time=start_ns or time.time_ns()
    )
    if error:
        current.set_status(Status(StatusCode.ERROR, error))
    current.end()


def set_error(span: Span, message: str) -> None:
    span.set_status(Status(StatusCode.ERROR, message))


def session_attributes(session: Any, operation: str) -> dict[str, Any]:
    """The GenAI attributes every span about a session carries."""
    out: dict[str, Any] = {
        CONVERSATION_ID: session.external_id,
        OPERATION: operation,
        REQUEST_MODEL: session.model,
    }
    if session.provider:
        out[PROVIDER] = session.provider
    return out


def usage_attributes(usage: Mapping[str, int]) -> dict[str, int]:
    """Provider-reported usage (the service's ``UsageData`` keys) as GenAI attributes."""
    return {
        INPUT_TOKENS: int(usage.get("input_tokens", 0)),
        OUTPUT_TOKENS: int(usage.get("output_tokens", 0)),
        CACHE_READ_TOKENS: int(usage.get("cache_read_tokens", 0)),
        CACHE_CREATION_TOKENS: int(usage.get("cache_creation_tokens", 0)),
    }


def record_token_usage(session: Any, usage: Mapping[str, int], operation: str = "chat") -> None:
    """``gen_ai.client.token.usage``: one input and one output measurement per reported call.

    Input counts every input token the call was billed for (cache reads and
    writes included), as the conventions define it.
    """
    if not _T.on:
        return
    attributes = {OPERATION: operation, REQUEST_MODEL: session.model}
    if session.provider:
        attributes[PROVIDER] = session.provider
    tokens = _T.get().tokens
    total_input = (
        int(usage.get("input_tokens", 0))
        + int(usage.get("cache_read_tokens", 0))
        + int(usage.get("cache_creation_tokens", 0))
    )
    tokens.record(total_input, {**attributes, TOKEN_TYPE: "input"})
    tokens.record(int(usage.get("output_tokens", 0)), {**attributes, TOKEN_TYPE: "output"})


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    # OpenTelemetry takes str, bool, int, float and sequences of them; None is dropped.
    if not attributes:
        return None
    return {k: v for k, v in attributes.items() if v is not None}
