"""What making a history well formed costs a context build. Prints figures; asserts nothing.

    python bench/bench_wellformed.py

Builds a 1,000-message window (a third tool calls, one in ten left
unanswered, a late result, a window that starts at a tool result) in the
anthropic and openai formats, with ``engine.wellformed`` and with the history
passed through as it is (what the assembler did before), and prints the
median build time of each. Pure engine: no database, no server.
"""

from __future__ import annotations

import statistics
import time
from unittest import mock

from common import (
    ROOT,  # noqa: F401  (puts the project on sys.path)
    figure,
    recording,
)

from contextsvc.engine import build
from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef

TEXT = "def handler(event):\n    return process(event['body'])\n" * 6


def window(n: int = 1000) -> list[Message]:
    out: list[Message] = [Message(role="tool", content=TEXT, tool_call_id="gone", name="bash")]
    call = 0
    while len(out) < n:
        out.append(Message(role="user", content=TEXT))
        call += 1
        out.append(
            Message(
                role="assistant",
                content="Looking.",
                tool_calls=(ToolCall(f"toolu_{call}", "bash", {"command": "ls"}),),
            )
        )
        if call % 10:
            out.append(Message(role="tool", content=TEXT, tool_call_id=f"toolu_{call}"))
    return out


def once_ms(fmt: str, parts: ContextParts) -> float:
    t0 = time.perf_counter()
    build_request(fmt, parts)
    return (time.perf_counter() - t0) * 1000


def as_stored(messages, tools=True):
    return list(messages)


def main() -> None:
    parts = ContextParts(
        model="m", max_output_tokens=1000, messages=window(), tools=[ToolDef("bash")]
    )
    rounds = 60
    print(f"build of a {len(parts.messages)}-message window, {rounds} interleaved rounds (ms)")
    for fmt in ("anthropic", "openai"):
        with_step, without = [], []
        for _ in range(rounds):  # interleaved: a loaded box slows both alike
            with_step.append(once_ms(fmt, parts))
            with mock.patch.object(build, "well_formed", as_stored):
                without.append(once_ms(fmt, parts))
        for name, fn in (("min", min), ("median", statistics.median)):
            a, b = fn(without), fn(with_step)
            figure(
                f"  {fmt:9s} {name:6s}: as stored {a:6.2f} ms, well formed {b:6.2f} ms"
                f" (+{b - a:.2f} ms)"
            )


if __name__ == "__main__":
    with recording(__file__):
        main()
