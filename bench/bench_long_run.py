"""An agent far past its window: does it lose anything? Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_long_run.py

The task (``fakes.long_run``): BENCH_LENGTHS Bash steps (80 and 200)
whose outputs run from 1 KB to 60 KB, one of 400 KB, each with a marker the
shell computes (``MARK-s003 <sha256 prefix>``, in the middle of the output:
BENCH_MARK_AT; on its first line for Claude Code: BENCH_CLAUDE_MARK_AT); then the question asks for six steps' markers (early,
middle, late). The fake upstream answers as a model that sees only the
request (``LongRunModel``): it finds a marker in the request text, else with
``history_search``, else ``tool_output_cache_grep`` on the refs it can see,
else by grepping a file the request says an output was saved to.

BENCH_SEARCH=off: the model leaves history_search alone (the figures of before).

Clients: the Anthropic SDK (the bench runs the Bash commands itself), and the
pinned Claude Code CLI when it is installed (tests/agents; BENCH_CLIENTS).
Each runs twice: through the proxy (a 48,000-token session window, 4,000 of
output, an upstream that refuses a request over 44,000 input tokens with the
API's 400 "prompt is too long") and straight to the fake with no limit (the
naive baseline: what it would have sent, and how many of those requests the
44,000 limit refuses). Tokens are the fake's estimate: JSON characters / 4
of system, messages and tools (``estimate_tokens``), the same for both.

Per run: markers found, upstream input tokens (sum over calls; proxied /
straight, target ≤ 0.35×), the largest request, requests refused by the
upstream (target 0), empty replies (target 0), the proxy's compactions (and
Claude Code's own), search calls and the time of a built-in round (from the
reply that calls the tool to the next request reaching the fake: the proxy
storing the call, running it and building the next request; the first search
of a session also indexes its backlog), p50/p99, wall time; then history_search
run in the bench's process on the finished session (index warm), p50/p99 of 3 × (6 asked
markers + every tenth step's header).
The proxy is the deployed one (gunicorn, one uvicorn worker) on a scratch
database (<name>_long_run).
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import anthropic
from common import django_on_scratch_database, pct, proxy_process

LENGTHS = [int(n) for n in os.environ.get("BENCH_LENGTHS", "80,200").split(",")]
CLIENTS = os.environ.get("BENCH_CLIENTS", "sdk,claude").split(",")
DUMP = os.environ.get("BENCH_DUMP")  # a folder: the question's requests go there as JSON
MARK_AT = float(os.environ.get("BENCH_MARK_AT", "0.5"))
# Claude Code keeps a Bash output over ~30 KB in a file of its own and sends only
# a 2 KB preview: a marker further in never reaches the proxy (nor the model,
# unless it reads that file). On the first line it is in what the proxy stores.
CLAUDE_MARK_AT = float(os.environ.get("BENCH_CLAUDE_MARK_AT", "0"))
# "off": the model does not call history_search (the figures from before it existed).
SEARCH = os.environ.get("BENCH_SEARCH", "on") != "off"
WARM = "index warm" if SEARCH else "its first call indexes the whole run"
WINDOW = 48_000
UPSTREAM_LIMIT = 44_000
KEY = "sk-bench-upstream"
MODEL = "claude-fake-large"


@dataclass
class Figures:
    found: int = 0
    asked: int = 0
    missed: str = ""
    tokens: int = 0
    largest: int = 0
    over_limit: int = 0
    calls: int = 0
    rejected: int = 0
    empty: int = 0
    compactions: int = 0
    client_compactions: int = 0
    searches: int = 0
    greps: int = 0
    file_greps: int = 0
    round_p50: float = 0.0
    round_p99: float = 0.0
    search_p50: float = 0.0
    search_p99: float = 0.0
    search_n: int = 0
    wall: float = 0.0
    error: str = ""
    # The proxy's "[Context: N% used …]" note: requests that carried one, the highest N.
    notes: int = 0
    note_max: int = 0


def run_client(client: str, base_url: str, api_key: str, sid: str | None, task) -> tuple:
    """(answer text, empty replies, error) of one run of ``client`` against ``base_url``."""
    from fakes.claude_code import run_claude
    from fakes.long_run import TASK
    from fakes.long_run_client import run_sdk_agent

    headers = {"X-Contextsvc-Session": sid} if sid else {}
    with tempfile.TemporaryDirectory() as scratch:
        if client == "sdk":
            sdk = anthropic.Anthropic(
                base_url=base_url, api_key=api_key, default_headers=headers, max_retries=0
            )
            run = run_sdk_agent(sdk, task, model=MODEL, cwd=Path(scratch))
            return run.answer, run.empty, run.error or ""
        home = Path(scratch) / "home"
        env = {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4000"}
        answer, empty, error = "", 0, ""
        for n, prompt in enumerate((TASK, task.question())):
            extra = ["--continue"] if n else []
            code, result, err = run_claude(
                base_url,
                api_key,
                home,
                model=MODEL,
                headers=headers,
                env=env,
                prompt=prompt,
                extra_args=extra,
                timeout=1800,
            )
            if code != 0 or result is None or result.get("is_error"):
                return (
                    answer,
                    empty,
                    f"claude exit {code}: {(result or {}).get('result')} {err[-300:]}",
                )
            answer = str(result.get("result") or "")
            empty += 0 if answer.strip() else 1
        return answer, empty, error


def search_times(session, task) -> list[float]:
    """history_search run in this process on the finished session (index warm: the run
    searched it): each asked marker and every tenth step's header, 3 times; ms per call."""
    from contextsvc.engine.recall import SEARCH_TOOL_NAME
    from fakes.long_run import label
    from sessions import builtin_tools

    queries = [f"MARK-{label(k)}" for k in task.asked()]
    queries += [f"STEP-{label(k)}-BEGIN" for k in range(0, task.steps, 10)]
    times = []
    for query in queries * 3:
        started = time.perf_counter()
        builtin_tools.call(session, SEARCH_TOOL_NAME, {"query": query})
        times.append((time.perf_counter() - started) * 1000)
    return times


def one_run(fake, client: str, steps: int, *, proxied: str | None, owner=None) -> Figures:
    """One run; ``proxied`` is the proxy's base URL (None: straight to the fake)."""
    from compaction.models import CompactionRun
    from fakes.anthropic_server import estimate_tokens
    from fakes.long_run import LongRunModel, LongTask, parse_answer
    from proxy.models import ClientCompaction
    from sessions.services.sessions import session_create

    at = CLAUDE_MARK_AT if client == "claude" else MARK_AT
    task = LongTask(steps=steps, nonce=uuid.uuid4().hex[:8], at=at)
    model = fake.agent = LongRunModel(task, use_search=SEARCH)
    fake.requests.clear()
    sid = None
    if proxied:
        sid = f"bench-long-{client}-{steps}-{task.nonce}"
        data = {"id": sid, "model": MODEL, "context_window": WINDOW, "max_output_tokens": 4000}
        session = session_create(owner=owner[0], data=data)
        fake.window = UPSTREAM_LIMIT
        started = time.perf_counter()
        answer, empty, error = run_client(client, proxied, owner[1], sid, task)
    else:
        fake.window = None
        started = time.perf_counter()
        answer, empty, error = run_client(client, fake.base_url, KEY, None, task)
    wall = time.perf_counter() - started
    requests = [
        r
        for r in fake.messages_requests()
        if r.body and not r.path.startswith("/v1/messages/count")
    ]
    tokens = [estimate_tokens(r.body) for r in requests]
    notes = [
        int(n) for r in requests for n in re.findall(r"\[Context: (\d+)% used", json.dumps(r.body))
    ]
    got, expected = parse_answer(answer), task.expected()
    if DUMP and requests:
        # The question's requests, for reading what the model was shown.
        name = f"{client}-{steps}-{'proxied' if proxied else 'straight'}.json"
        last = [r.body for r in requests[-(len(model.search_ms) + 1) :]]
        Path(DUMP, name).write_text(json.dumps(last, indent=1))
    figures = Figures(
        found=sum(1 for k, v in expected.items() if got.get(k) == v),
        asked=len(expected),
        missed=" ".join(k for k, v in expected.items() if got.get(k) != v),
        tokens=sum(tokens),
        largest=max(tokens, default=0),
        over_limit=sum(1 for t in tokens if t > UPSTREAM_LIMIT),
        calls=len(requests),
        rejected=sum(1 for r in requests if r.status not in (0, 200)),
        empty=empty,
        client_compactions=model.client_compactions,
        searches=model.searches,
        greps=model.greps,
        file_greps=model.file_greps,
        round_p50=pct(model.search_ms, 0.5) if model.search_ms else 0.0,
        round_p99=pct(model.search_ms, 0.99) if model.search_ms else 0.0,
        wall=wall,
        error=error,
        notes=len(notes),
        note_max=max(notes, default=0),
    )
    if proxied:
        times = search_times(session, task)
        if times:
            figures.search_n = len(times)
            figures.search_p50, figures.search_p99 = pct(times, 0.5), pct(times, 0.99)
        figures.compactions = CompactionRun.objects.filter(session=session).count()
        figures.client_compactions = ClientCompaction.objects.filter(session=session).count()
    return figures


def show(name: str, f: Figures, straight: Figures | None) -> None:
    ratio = f" ({f.tokens / straight.tokens:.2f}× straight; target ≤ 0.35×)" if straight else ""
    print(
        f"  {name}: markers {f.found}/{f.asked}{' (missed ' + f.missed + ')' if f.missed else ''};"
        f" input tokens {f.tokens:,}{ratio}, largest request {f.largest:,},"
        f" {f.over_limit} over {UPSTREAM_LIMIT:,}; calls {f.calls}, rejected {f.rejected},"
        f" empty replies {f.empty}; usage notes {f.notes} (highest {f.note_max}%)"
    )
    print(
        f"    compactions {f.compactions} (client's own {f.client_compactions}); searches"
        f" {f.searches}, ref greps {f.greps}, file greps {f.file_greps}; built-in round"
        f" p50 {f.round_p50:.0f} ms p99 {f.round_p99:.0f} ms; wall {f.wall:.1f} s"
        + (
            f"\n    history_search afterwards (in process, {WARM}), {f.search_n} calls:"
            f" p50 {f.search_p50:.0f} ms, p99 {f.search_p99:.0f} ms"
            if f.search_n
            else ""
        )
        + (f"\n    ERROR {f.error}" if f.error else "")
    )


def main() -> None:
    db_url = django_on_scratch_database("_long_run")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per SDK call otherwise
    from fakes.anthropic_server import FakeAnthropic
    from fakes.claude_code import claude_binary
    from sessions.services.keys import agent_key_create

    clients = list(CLIENTS)
    if "claude" in clients:
        try:
            claude_binary()
        except FileNotFoundError:
            print("Claude Code is not installed (bin/test --agents installs it): SDK client only")
            clients.remove("claude")
    owner = agent_key_create(name="bench-long-run")
    print(
        f"Long run: session window {WINDOW:,}, upstream refuses > {UPSTREAM_LIMIT:,} input tokens"
        f" (fake's estimate: JSON chars / 4); markers at {MARK_AT:.0%} of each output"
        f" ({CLAUDE_MARK_AT:.0%} for Claude Code); the model {'uses' if SEARCH else 'ignores'}"
        " history_search"
    )
    with FakeAnthropic(api_key=KEY) as fake:
        port, server = proxy_process(
            db_url,
            CONTEXTSVC_UPSTREAM_ANTHROPIC_URL=fake.base_url,
            CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY=KEY,
        )
        proxy = f"http://127.0.0.1:{port}/proxy/anthropic"
        try:
            for client in clients:
                for steps in LENGTHS:
                    print(f"{client}, {steps} steps:")
                    straight = one_run(fake, client, steps, proxied=None)
                    show("straight (naive)", straight, None)
                    if straight.over_limit:
                        print(
                            f"    naive: {straight.over_limit} of its {straight.calls} requests are"
                            f" over {UPSTREAM_LIMIT:,} tokens: the real upstream refuses them"
                            f" (from the first at that size on, the run cannot go on)"
                        )
                    proxied = one_run(fake, client, steps, proxied=proxy, owner=owner)
                    show("through the proxy", proxied, straight)
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
