"""The SDK's in-memory span exporter and metric reader, installed as the service's telemetry."""

from __future__ import annotations

from collections.abc import Iterator

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contextsvc import telemetry


def in_memory_otel() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    """For a fixture: ``yield from in_memory_otel()``; telemetry is reset afterwards."""
    spans = InMemorySpanExporter()
    reader = InMemoryMetricReader()
    telemetry.configure(span_processor=SimpleSpanProcessor(spans), metric_reader=reader)
    yield spans, reader
    telemetry.reset()


def spans_named(exporter, name):
    return [s for s in exporter.get_finished_spans() if s.name == name]


def token_points(reader):
    data = reader.get_metrics_data()
    points = []
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == telemetry.TOKEN_USAGE_METRIC:
                    assert metric.unit == "{token}"
                    points.extend(metric.data.data_points)
    return points
