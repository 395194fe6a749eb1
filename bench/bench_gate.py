"""The proxy's request gate on the hot path: what it adds to reading a body. Prints figures;
asserts nothing. No database needed.

    python bench/bench_gate.py

For histories of 200 and 2,000 messages (string turns as in bench_proxy.py,
and a tool loop of tool_use / tool_result blocks) with 40 tool definitions:
the median time of the parse alone (orjson, what the proxy did before) and of
the whole gate (``proxy.gate.read``: size, strict JSON, NUL scan, the
envelope's and tools' rules, every message an object, the leading messages
in full). The rest of the history is checked where a call converts it (only
what is new), so it is not in these figures.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from common import ROOT  # bench/ is sys.path[0] as a script

sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

import orjson  # noqa: E402

from proxy import gate  # noqa: E402
from proxy.providers import ANTHROPIC  # noqa: E402

RUNS = int(os.environ.get("BENCH_GATE_RUNS", "200"))
TOOLS = [
    {
        "name": f"tool_{i}",
        "description": "d" * 300,
        "input_schema": {
            "type": "object",
            "properties": {f"p{j}": {"type": "string", "description": "x" * 80} for j in range(8)},
        },
    }
    for i in range(40)
]


def turns(n: int) -> list[dict]:
    out = []
    for i in range(n // 2):
        out.append({"role": "user", "content": f"step {i}: " + "please look at the handler " * 20})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"done {i}"}]})
    return out


def tool_loop(n: int) -> list[dict]:
    out = []
    for i in range(n // 2):
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "x" * 400}
        use = {"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"path": "/a/b"}}
        out.append({"role": "user", "content": [result]})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"done {i}"}, use]})
    return out


class Request:
    def __init__(self, raw: bytes) -> None:
        self.body = raw
        self.path = "/proxy/anthropic/v1/messages"
        self.headers = {"content-length": str(len(raw))}


def median_ms(work) -> float:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    for n in (200, 2000):
        for label, messages in (("turns", turns(n)), ("tool loop", tool_loop(n))):
            body = {"model": "claude-opus-4-5", "max_tokens": 4096, "system": "s" * 2000}
            raw = orjson.dumps({**body, "tools": TOOLS, "messages": messages})
            parse = median_ms(lambda raw=raw: orjson.loads(raw))
            whole = median_ms(lambda raw=raw: gate.read(Request(raw), ANTHROPIC))
            print(
                f"{n:5d} messages, {label:9s} {len(raw) / 1e6:5.2f} MB: parse {parse:6.2f} ms,"
                f" gate {whole:6.2f} ms, added {whole - parse:+.2f} ms"
            )


if __name__ == "__main__":
    main()
