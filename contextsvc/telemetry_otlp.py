"""The OTLP/HTTP exporters, loaded only when telemetry is on (contextsvc/telemetry.py).

They bring protobuf and requests: about half a second of every start of a
process that exports nothing, which is most of them (the quick start's restart
is mostly imports).
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanProcessor


def span_processor() -> SpanProcessor:
    """Spans batched to the OTLP endpoint the standard variables name."""
    return BatchSpanProcessor(OTLPSpanExporter())


def metric_reader() -> MetricReader:
    """Metrics read periodically and sent to the same endpoint."""
    return PeriodicExportingMetricReader(OTLPMetricExporter())
