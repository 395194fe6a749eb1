"""Claude Code straight to the fake Messages API vs through the proxy. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_claude_code.py

The same task both ways: the pinned Claude Code CLI (tests/agents, installed
by bin/test) in print mode, against the suite's fake upstream answering as an
agent (``fakes.claude_code.BashAgent``: BENCH_STEPS Bash steps of
BENCH_LINES lines each, then a final answer). Through the proxy the session has
a 48,000-token window (BENCH_WINDOW) and Claude Code sends
``CLAUDE_CODE_MAX_OUTPUT_TOKENS=4000``; straight, the fake has no window, so
the full history shows what the model would have been sent.

Per run (BENCH_RUNS, median shown): wall time, Claude Code's own API time
(``duration_api_ms``), calls, input tokens per call as the fake counts them
(JSON characters / 4: the last call and the sum), and the proxy's added time
per call: the mean gap between two calls' arrivals at the fake, proxied minus
straight (the client's own work and the fake's answer are in both; CLI start-up
in neither), target ≤ 50 ms. The proxy process is the deployed one: gunicorn with one
uvicorn worker on ``contextsvc.asgi``, on a scratch database (<name>_claude_code).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from common import django_on_scratch_database, proxy_process

RUNS = int(os.environ.get("BENCH_RUNS", "3"))
STEPS = int(os.environ.get("BENCH_STEPS", "10"))
LINES = int(os.environ.get("BENCH_LINES", "5000"))
WINDOW = int(os.environ.get("BENCH_WINDOW", "48000"))
# "off": the proxy runs no built-in tools for these sessions (policy.proxy.builtin_tools),
# so the end of each answer is relayed without waiting for the reply to be stored.
BUILTINS = os.environ.get("BENCH_BUILTINS", "on") != "off"
KEY = "sk-bench-upstream"
MODEL = "claude-fake-large"


def one_run(fake, base_url: str, api_key: str, headers: dict[str, str]) -> dict[str, float]:
    from fakes.anthropic_server import estimate_tokens
    from fakes.claude_code import BashAgent, run_claude

    fake.requests.clear()
    fake.agent = BashAgent(steps=STEPS, lines=LINES)
    with tempfile.TemporaryDirectory() as home:
        started = time.perf_counter()
        code, result, err = run_claude(
            base_url,
            api_key,
            Path(home),
            model=MODEL,
            headers=headers,
            env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"},
            timeout=300,
        )
        wall = time.perf_counter() - started
    if code != 0 or result is None:
        raise RuntimeError(f"claude failed ({code}): {err[-500:]} {result}")
    answered = [r for r in fake.messages_requests() if r.body and r.status == 200]
    bodies = [r.body for r in answered]
    tokens = [estimate_tokens(b) for b in bodies]
    # From one call's arrival at the fake to the next: the client's own work,
    # the fake's answer and, proxied, everything the proxy adds around both.
    gaps = [(b.at - a.at) * 1000 for a, b in zip(answered, answered[1:], strict=False)]
    return {
        "wall_s": wall,
        "api_ms": float(result.get("duration_api_ms") or 0),
        "calls": len(bodies),
        "last_tokens": tokens[-1] if tokens else 0,
        "max_tokens": max(tokens) if tokens else 0,
        "sum_tokens": sum(tokens),
        "gap_ms": statistics.mean(gaps) if gaps else 0.0,
        "rejected": sum(1 for r in fake.messages_requests() if r.status not in (0, 200)),
    }


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    db_url = django_on_scratch_database("_claude_code")
    from fakes.anthropic_server import FakeAnthropic
    from fakes.claude_code import claude_binary
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    claude_binary()
    key, raw = agent_key_create(name="bench-claude-code")
    print(
        f"Claude Code, {STEPS} Bash steps of {LINES} lines; proxied session window {WINDOW:,};"
        f" {RUNS} runs each, built-in tools {'on' if BUILTINS else 'off'}, medians"
        " (figures taken on a shared, loaded machine)"
    )
    with FakeAnthropic(api_key=KEY) as fake:
        port, server = proxy_process(
            db_url,
            CONTEXTSVC_UPSTREAM_ANTHROPIC_URL=fake.base_url,
            CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY=KEY,
        )
        try:
            straight, proxied = [], []
            for n in range(RUNS):
                straight.append(one_run(fake, fake.base_url, KEY, {}))
                sid = f"bench-cc-{n}"
                session_create(
                    owner=key,
                    data={
                        "id": sid,
                        "model": MODEL,
                        "context_window": WINDOW,
                        "max_output_tokens": 4000,
                        "policy": {"proxy": {"builtin_tools": BUILTINS}},
                    },
                )
                proxied.append(
                    one_run(
                        fake,
                        f"http://127.0.0.1:{port}/proxy/anthropic",
                        raw,
                        {"X-Contextsvc-Session": sid},
                    )
                )
        finally:
            server.terminate()
            server.wait(timeout=10)
    rows = [("straight to the fake", straight), ("through the proxy", proxied)]
    print(
        f"{'':24}{'wall s':>8}{'API ms':>9}{'calls':>7}{'last in':>10}{'max in':>9}{'sum in':>10}"
    )
    for name, runs in rows:
        print(
            f"{name:24}{median(runs, 'wall_s'):8.2f}{median(runs, 'api_ms'):9.0f}"
            f"{median(runs, 'calls'):7.0f}{median(runs, 'last_tokens'):10,.0f}"
            f"{median(runs, 'max_tokens'):9,.0f}{median(runs, 'sum_tokens'):10,.0f}"
        )
    calls = median(proxied, "calls")
    added = [p["gap_ms"] - s["gap_ms"] for s, p in zip(straight, proxied, strict=True)]
    api = [
        (p["api_ms"] - s["api_ms"]) / max(1, p["calls"])
        for s, p in zip(straight, proxied, strict=True)
    ]
    print(
        f"added per call through the proxy: {statistics.median(added):.1f} ms (mean gap between"
        f" calls at the fake, proxied - straight; target <= 50 ms); Claude Code's own API time:"
        f" +{statistics.median(api):.1f} ms per call (it counts until the stream's connection ends)"
    )
    over = sum(1 for r in straight if r["max_tokens"] > WINDOW)
    print(
        f"straight: the largest call is {median(straight, 'max_tokens'):,.0f} tokens, over the"
        f" {WINDOW:,} window in {over}/{RUNS} runs; proxied: at most {median(proxied, 'max_tokens'):,.0f}"
        f" ({median(proxied, 'sum_tokens') / max(1, median(straight, 'sum_tokens')):.0%} of the input"
        f" tokens sent straight over {calls:.0f} calls); rejected by the fake: "
        f"{sum(r['rejected'] for r in proxied)}"
    )


if __name__ == "__main__":
    main()
