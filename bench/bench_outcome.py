"""What following a stream's outcome adds to relaying it (``proxy.outcome.Watch``). Prints
figures; asserts nothing. No database needed.

    python bench/bench_outcome.py

An Anthropic stream of 2,000 text deltas (the fake's frames) is parsed as the proxy
parses it (``SseParser``, the naive way: what relaying already costs) and parsed with
each event also seen by a ``Watch`` (counted, the final event and errors noted). The
median of each and their ratio. The outcome's own write (one UPDATE when the call
ends) is after the stream's last byte, not in these figures.
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

from contextsvc.engine.providers.sse import SseParser  # noqa: E402
from fakes.streams import anthropic_frame  # noqa: E402
from proxy.outcome import Watch  # noqa: E402

RUNS = int(os.environ.get("BENCH_OUTCOME_RUNS", "50"))
DELTAS = 2_000


def stream() -> bytes:
    events = [{"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 9}}}]
    events.append({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
    events += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "w "}}
        for _ in range(DELTAS)
    ]
    events += [{"type": "content_block_stop", "index": 0}, {"type": "message_stop"}]
    return b"".join(anthropic_frame(e) for e in events)


def run(raw: bytes, watch: Watch | None) -> float:
    start = time.perf_counter()
    parser = SseParser()
    for i in range(0, len(raw), 4096):
        for event in parser.feed(raw[i : i + 4096]):
            if watch is not None:
                watch.see(event)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    raw = stream()
    plains, watched = [], []
    for _ in range(RUNS):  # interleaved: both see the same machine load
        plains.append(run(raw, None))
        watch = Watch()
        watched.append(run(raw, watch))
        assert watch.ended and watch.events == DELTAS + 4
    plain, with_watch = statistics.median(plains), statistics.median(watched)
    extra = with_watch - plain
    print(f"stream of {DELTAS + 4} events, {len(raw) / 1024:.0f} KB, median of {RUNS} runs")
    print(f"  parse only (relaying already does it): {plain:.2f} ms")
    print(f"  parse + Watch.see per event:            {with_watch:.2f} ms")
    print(
        f"  added: {extra:.2f} ms ({extra * 1000 / (DELTAS + 4):.2f} us/event, x{with_watch / plain:.2f})"
    )


if __name__ == "__main__":
    main()
