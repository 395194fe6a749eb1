"""Native formats and OpenTelemetry on the append path. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_native.py

In process, through Django's test client (middleware, ninja, the handler, the
append service, PostgreSQL): no HTTP server, so the figures are the service's
own cost. CPU time of this process (``time.process_time``) is the main figure
— the machine may be busy — with wall-clock p50 beside it. The variants run
interleaved, round after round, so a change in load hits them alike.

1. The same 8-message tool-using batch posted in the service's own shape and
   as Anthropic, OpenAI Chat and OpenAI Responses messages: cost per batch,
   ratio to the own shape (target: native ≤ 1.10).
2. Append p50 with OpenTelemetry off and on (the SDK with a batch span
   processor and a metric reader, exporting in memory): ratio (target ≤ 1.05).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable

from common import django_on_scratch_database, drop_database, figure, pct, record, recording

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "30"))
PER_ROUND = int(os.environ.get("BENCH_PER_ROUND", "10"))
TEXT = "The function parses the request body and returns the record it found.\n" * 6
OUTPUT = "\n".join(f"src/module_{n}.py:{n}: def handler_{n}(event): ..." for n in range(60))


def own(ids: list[str]) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": TEXT}]
    for call_id in ids:
        out.append(
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [{"id": call_id, "name": "grep", "arguments": {"pattern": "def"}}],
            }
        )
        out.append({"role": "tool", "tool_call_id": call_id, "content": OUTPUT})
    out.append({"role": "assistant", "content": TEXT})
    return out


def anthropic(ids: list[str]) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": TEXT}]
    for call_id in ids:
        out.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking."},
                    {
                        "type": "tool_use",
                        "id": call_id,
                        "name": "grep",
                        "input": {"pattern": "def"},
                    },
                ],
            }
        )
        out.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call_id, "content": OUTPUT}],
            }
        )
    out.append({"role": "assistant", "content": [{"type": "text", "text": TEXT}]})
    return out


def openai(ids: list[str]) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": TEXT}]
    for call_id in ids:
        out.append(
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "grep", "arguments": '{"pattern": "def"}'},
                    }
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": call_id, "content": OUTPUT})
    out.append({"role": "assistant", "content": TEXT})
    return out


def responses(ids: list[str]) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": TEXT}]
    for call_id in ids:
        out.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Looking."}],
            }
        )
        out.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "grep",
                "arguments": '{"pattern": "def"}',
            }
        )
        out.append({"type": "function_call_output", "call_id": call_id, "output": OUTPUT})
    out.append(
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": TEXT}]}
    )
    return out


def main() -> None:
    db_url = django_on_scratch_database(
        "_bench_native",
        CONTEXTSVC_RATE_LIMIT="off",
        CONTEXTSVC_RATE_LIMIT_MB="off",
        CONTEXTSVC_RATE_PACE="off",
    )
    try:
        run()
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(db_url)


def run() -> None:
    from django.test import Client
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from contextsvc import telemetry
    from sessions.services.keys import agent_key_create

    _, raw = agent_key_create(name="bench-native")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    counter = iter(range(10**9))

    def session(sid: str) -> str:
        body = {"model": "claude-sonnet-4-5", "id": sid, "context_window": 100_000_000}
        response = client.post(
            "/api/v1/sessions", json.dumps(body), content_type="application/json"
        )
        assert response.status_code == 201, response.content
        return sid

    shapes: dict[str, tuple[str, Callable[[list[str]], list[dict]]]] = {
        "own": ("", own),
        "anthropic": ("?format=anthropic", anthropic),
        "openai": ("?format=openai", openai),
        "responses": ("?format=responses", responses),
    }
    sids = {name: session(f"native-{name}") for name in shapes}

    def post(name: str) -> tuple[float, float]:
        query, make = shapes[name]
        n = next(counter)
        body = json.dumps({"messages": make([f"call_{n}_a", f"call_{n}_b", f"call_{n}_c"])})
        url = f"/api/v1/sessions/{sids[name]}/messages{query}"
        cpu, wall = time.process_time(), time.perf_counter()
        response = client.post(url, body, content_type="application/json")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        assert response.status_code == 200, response.content
        assert len(response.json()["messages"]) == 8
        return cpu, wall

    for name in shapes:  # warm up each path (imports, prepared statements, caches)
        for _ in range(5):
            post(name)
    cpu: dict[str, list[float]] = {name: [] for name in shapes}
    wall: dict[str, list[float]] = {name: [] for name in shapes}
    for _ in range(ROUNDS):
        for name in shapes:
            for _ in range(PER_ROUND):
                c, w = post(name)
                cpu[name].append(c)
                wall[name].append(w)
    base_cpu = statistics.mean(cpu["own"])
    print(f"1. one 8-message batch (3 tool calls), {ROUNDS * PER_ROUND} posts per shape")
    print(f"   {'shape':<10} {'CPU mean':>10} {'CPU p50':>10} {'wall p50':>10} {'CPU ratio':>10}")
    for name in shapes:
        mean = statistics.mean(cpu[name])
        print(
            f"   {name:<10} {mean * 1000:>8.2f}ms {pct(cpu[name], 0.5) * 1000:>8.2f}ms"
            f" {pct(wall[name], 0.5) * 1000:>8.2f}ms {mean / base_cpu:>10.3f}"
        )
        record(
            f"8-message batch as {name}",
            f"CPU mean {mean * 1000:.2f} ms, CPU p50 {pct(cpu[name], 0.5) * 1000:.2f} ms,"
            f" wall p50 {pct(wall[name], 0.5) * 1000:.2f} ms, CPU ratio {mean / base_cpu:.3f}",
        )

    # 2. OpenTelemetry off / on, interleaved, same shape (own), one session each.
    modes = {"off": session("otel-off"), "on": session("otel-on")}
    otel_cpu: dict[str, list[float]] = {"off": [], "on": []}
    otel_wall: dict[str, list[float]] = {"off": [], "on": []}
    exporters: list[InMemorySpanExporter] = []

    def use(mode: str) -> None:
        telemetry.reset()  # flushes and shuts down the last providers
        if mode == "on":
            exporters.append(InMemorySpanExporter())
            telemetry.configure(
                span_processor=BatchSpanProcessor(exporters[-1]),
                metric_reader=InMemoryMetricReader(),
            )

    def append(mode: str) -> None:
        n = next(counter)
        body = json.dumps({"messages": own([f"call_{n}_a", f"call_{n}_b", f"call_{n}_c"])})
        c, w = time.process_time(), time.perf_counter()
        response = client.post(
            f"/api/v1/sessions/{modes[mode]}/messages", body, content_type="application/json"
        )
        otel_cpu[mode].append(time.process_time() - c)
        otel_wall[mode].append(time.perf_counter() - w)
        assert response.status_code == 200

    for mode in ("off", "on"):
        use(mode)
        for _ in range(5):
            append(mode)
        otel_cpu[mode].clear()
        otel_wall[mode].clear()
    for _ in range(ROUNDS):
        for mode in ("off", "on"):
            use(mode)
            for _ in range(PER_ROUND):
                append(mode)
    telemetry.reset()
    print(f"2. append with OpenTelemetry off / on, {ROUNDS * PER_ROUND} appends each")
    for mode in ("off", "on"):
        figure(
            f"   OpenTelemetry {mode:<4}: CPU p50 {pct(otel_cpu[mode], 0.5) * 1000:.2f} ms,"
            f" wall p50 {pct(otel_wall[mode], 0.5) * 1000:.2f} ms"
        )
    figure(
        f"   ratio on/off: CPU p50 {pct(otel_cpu['on'], 0.5) / pct(otel_cpu['off'], 0.5):.3f},"
        f" wall p50 {pct(otel_wall['on'], 0.5) / pct(otel_wall['off'], 0.5):.3f}"
        f" ({sum(len(e.get_finished_spans()) for e in exporters)} spans exported)"
    )
    print(f"   load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    with recording(__file__):
        main()
