"""Proxy benchmark, section 5 of bench_proxy.py: Gemini beside Chat Completions.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_proxy_gemini.py

Its own fake upstreams (fakes/) and proxy, served as deployed (gunicorn, one
uvicorn worker on ``contextsvc.asgi``); run alone it uses its own database
(<name>_proxy, created and migrated here). Streamed calls, with a history of
200 and of 2,000 messages (BENCH_HISTORIES), BENCH_CALLS (60) each:

- through ``/proxy/gemini/v1beta/models/{model}:streamGenerateContent?alt=sse``
  and ``/proxy/openai/v1/chat/completions``, each also direct to its fake: the
  added time to first byte (p50 / p99) and the proxy worker's CPU time per
  call, the reply's storage included;
- the two APIs take turns call by call, so a load that changes mid-run weighs
  on both alike, and both fakes answer the same text in the same 7-character
  pieces (the same number of chunks to relay);
- the ratio Gemini / Chat of CPU per call and of added TTFB p50 (target
  ≤ 1.10), the machine's load average beside each figure: on a shared machine
  the wall-clock figures move with it, the CPU figures much less.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from common import (
    OUT_OF_REACH,
    against,
    client_gc_paused,
    cpu_seconds,
    django_on_scratch_database,
    pct,
    proxy_process,
    worker_pids,
)

HISTORIES = [int(n) for n in os.environ.get("BENCH_HISTORIES", "200,2000").split(",")]
CALLS = int(os.environ.get("BENCH_CALLS", "60"))
KEY = "sk-bench-upstream"
FILLER = "please look at the handler " * 20


def ttfb(url: str, body: dict, headers: dict) -> float:
    """Seconds to the first body byte of a streamed call (read to its end)."""
    started = time.perf_counter()
    first = None
    with httpx.stream("POST", url, json=body, headers=headers, timeout=300) as response:
        assert response.status_code == 200, response.read()[:300]
        for _ in response.iter_raw():
            first = first or time.perf_counter()
    return (first or time.perf_counter()) - started


GEMINI_MODEL = "gemini-fake-pro"
CHAT_MODEL = "gpt-fake-large"
# What both fakes answer: the same text, so the same number of chunks to relay.
ANSWER = "The handler is fine; the parser test fails on an empty token. " * 3


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


@dataclass
class Route:
    """One provider API's streamed call, direct to its fake and through the proxy."""

    name: str
    direct_url: str
    proxy_url: str
    headers: dict
    body: dict  # everything but the history
    key: str  # the history's field
    user: Callable[[str], dict]
    assistant: Callable[[str], dict]


def chat_route(base_url: str, port: int, agent_key: str) -> Route:
    return Route(
        name="chat",
        direct_url=f"{base_url}/v1/chat/completions",
        proxy_url=f"http://127.0.0.1:{port}/proxy/openai/v1/chat/completions",
        headers={"authorization": f"Bearer {KEY}"},
        body={"model": CHAT_MODEL, "max_tokens": 500, "stream": True},
        key="messages",
        user=lambda text: {"role": "user", "content": text},
        assistant=lambda text: {"role": "assistant", "content": text},
    )


def gemini_route(base_url: str, port: int, agent_key: str) -> Route:
    method = f"models/{GEMINI_MODEL}:streamGenerateContent?alt=sse"
    return Route(
        name="gemini",
        direct_url=f"{base_url}/v1beta/{method}",
        proxy_url=f"http://127.0.0.1:{port}/proxy/gemini/v1beta/{method}",
        headers={"x-goog-api-key": KEY},
        body={"generationConfig": {"maxOutputTokens": 500}},
        key="contents",
        user=lambda text: {"role": "user", "parts": [{"text": text}]},
        assistant=lambda text: {"role": "model", "parts": [{"text": text}]},
    )


def interleaved(
    routes: list[Route], agent_key: str, size: int, worker: int
) -> dict[str, tuple[list[float], float]]:
    """Per route: the added TTFB of each call (ms) and the worker's CPU per proxied call
    (ms), the routes taking turns call by call."""
    state = {}
    for route in routes:
        proxied = {**route.headers, "x-contextsvc-key": agent_key}
        proxied["x-contextsvc-session"] = f"ses_{route.name}_{size}"
        turns = []
        for i in range(size // 2):
            turns += [route.user(f"step {i}: {FILLER}"), route.assistant(f"done {i}")]
        turns.append(route.user("next"))
        ttfb(route.proxy_url, {**route.body, route.key: turns}, proxied)  # the first sync
        state[route.name] = (proxied, turns, [], [0.0])
    for n in range(CALLS):
        for route in routes:
            proxied, turns, added, cpu = state[route.name]
            turns += [route.assistant(f"reply {n}"), route.user(f"turn {n}")]
            body = {**route.body, route.key: turns}
            with client_gc_paused():
                direct = ttfb(route.direct_url, body, route.headers)
                before = cpu_seconds(worker)
                through = ttfb(route.proxy_url, body, proxied)
            time.sleep(0.05)  # the reply is stored after the stream ends: count it too
            cpu[0] += cpu_seconds(worker) - before
            added.append((through - direct) * 1000)
    return {name: (added, cpu[0] / CALLS * 1000) for name, (_, _, added, cpu) in state.items()}


def twin_profiles(window: int = 1_000_000) -> None:
    """Both fake models get gpt-4o's profile (prices, caching minimum, output limit) with
    the same ``window``: the two sessions do the same accounting work, and 2,000 messages
    fit with no compaction."""
    from sessions.models import ModelProfile

    for provider, model in (("openai", CHAT_MODEL), ("google", GEMINI_MODEL)):
        row = ModelProfile.objects.get(provider="openai", model="gpt-4o")
        ModelProfile.objects.filter(provider=provider, model=model).delete()
        row.pk, row.provider, row.model, row.context_window = None, provider, model, window
        row.save()


def gemini_vs_chat(db_url: str, agent_key: str) -> None:
    """The module doc's figures: its own fakes and proxy process on ``db_url``."""
    from fakes.gemini_server import FakeGemini
    from fakes.openai_server import FakeOpenAI

    twin_profiles()

    gemini = FakeGemini(api_key=KEY, responder=lambda body: ANSWER).start()
    chat = FakeOpenAI(api_key=KEY, responder=lambda body: ANSWER).start()
    port, server = proxy_process(
        db_url,
        CONTEXTSVC_UPSTREAM_GEMINI_URL=gemini.base_url,
        CONTEXTSVC_UPSTREAM_OPENAI_URL=f"{chat.base_url}/v1",
    )
    try:
        worker = worker_pids(server.pid)[0]
        routes = [chat_route(chat.base_url, port, agent_key)]
        routes.append(gemini_route(gemini.base_url, port, agent_key))
        print(
            f"5. Gemini beside Chat Completions, streamed ({CALLS} calls each, interleaved; "
            f"{load()} at the start):"
        )
        for size in HISTORIES:
            figures = interleaved(routes, agent_key, size, worker)
            at = load()
            for name, (added, cpu) in figures.items():
                print(
                    f"   {size:>5}+ messages {name:>6}: added TTFB p50 {pct(added, 0.5):.2f} ms"
                    f"  p99 {pct(added, 0.99):.2f} ms  CPU {cpu:.2f} ms/call  [{at}]"
                )
            (chat_added, chat_cpu), (gem_added, gem_cpu) = figures["chat"], figures["gemini"]
            ttfb_ratio = pct(gem_added, 0.5) / max(pct(chat_added, 0.5), 1e-9)
            print(
                f"   {size:>5}+ messages Gemini/Chat: CPU per call "
                f"{against(gem_cpu / chat_cpu, 1.1, '×')}, added TTFB p50 "
                f"{against(ttfb_ratio, 1.1, '×')}  [{at}]"
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
        gemini.stop()
        chat.stop()


def main() -> None:
    os.environ.update(OUT_OF_REACH)
    db_url = django_on_scratch_database("proxy")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    from sessions.services.keys import agent_key_create

    _, agent_key = agent_key_create(name="bench")
    gemini_vs_chat(db_url, agent_key)


if __name__ == "__main__":
    main()
