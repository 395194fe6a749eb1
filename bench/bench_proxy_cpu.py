"""The proxy's per-call work in this process: CPU and queries per call, by session length.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_proxy_cpu.py

Runs what a proxied call runs between the request and upstream, and after
the reply — the body parse, ``prepare`` (caller, session, sync, the build),
the upstream body written, the reply stored — for Messages, Chat Completions,
Responses and Gemini, with no HTTP server and no upstream (the relay is per
chunk, not per message; the client's own writing of its body is not timed), on
sessions of BENCH_HISTORIES (200 and 2,000) messages, after two calls that are not
measured (the session's first sync, and the first reuse of a parsed body). Prints CPU ms per call
and SQL statements per call: neither must grow with the session; then
Gemini's CPU per call over Chat Completions' (target ≤ 1.10), with the load
average. BENCH_PROFILE=anthropic|openai|responses|gemini prints a cProfile of that dialect's
calls at the longest history (sorted by BENCH_SORT, cumulative time).
BENCH_MARKERS=1 puts a cache marker on the newest Messages message, as
Claude Code does: it moves to the next one on every call.
Round trips to PostgreSQL (``roundtrips.RoundTrips``: statements, PREPAREs,
BEGIN / COMMIT) are counted per call, and apart for the work before the
forward (``prepare``: what delays the first byte); BENCH_TRACE=1 prints one
call's round trips at the longest history.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import time
from contextlib import nullcontext

import orjson
from common import OUT_OF_REACH, django_on_scratch_database
from instructions import ACTIVE as COUNTING
from instructions import counted, rerun_under_callgrind
from roundtrips import RoundTrips

HISTORIES = [int(n) for n in os.environ.get("BENCH_HISTORIES", "200,2000").split(",")]
CALLS = int(os.environ.get("BENCH_CALLS", "40"))
PROFILE = os.environ.get("BENCH_PROFILE", "")
TRACE = os.environ.get("BENCH_TRACE", "") == "1"
MARKERS = os.environ.get("BENCH_MARKERS", "") == "1"
MODEL = {
    "anthropic": "claude-opus-4-5",
    "openai": "gpt-4o",
    "responses": "gpt-5.1-codex",
    "gemini": "gemini-2.5-pro",
}
# BENCH_DIALECTS=gemini,openai: those alone, in that order (a later one pays the
# garbage collector's scans of the earlier ones' cached windows: swap to compare).
DIALECTS = tuple(os.environ.get("BENCH_DIALECTS", ",".join(MODEL)).split(","))
AFTER_FIRST_SYNC: list = []  # callables run after each session's first sync (stage timers)
FILLER = "please look at the handler " * 20


def history(dialect: str, n: int) -> list[dict]:
    """``n`` messages (or items) of the dialect's history, ending on a user turn."""
    out: list[dict] = []
    if dialect == "responses":
        out.append({"role": "user", "content": "start"})
        for i in range(n // 2):
            call = f"call_bench_{i}"
            out += [
                {"type": "function_call", "call_id": call, "name": "exec_command",
                 "arguments": f'{{"cmd": "step {i}"}}'},
                {"type": "function_call_output", "call_id": call, "output": f"output {i} " * 40},
            ]  # fmt: skip
        return out
    if dialect == "gemini":
        for i in range(n // 2):
            out.append({"role": "user", "parts": [{"text": f"step {i}: {FILLER}"}]})
            out.append({"role": "model", "parts": [{"text": f"done {i}"}]})
        return [*out, user_turn(dialect, "next")]
    for i in range(n // 2):
        out.append({"role": "user", "content": f"step {i}: {FILLER}"})
        if dialect == "anthropic":
            out.append({"role": "assistant", "content": [{"type": "text", "text": f"done {i}"}]})
        else:
            out.append({"role": "assistant", "content": f"done {i}"})
    out.append({"role": "user", "content": "next"})
    return out


def marked(message: dict) -> dict:
    """A Messages message with a cache marker on its last block (others as they are)."""
    content = message.get("content")
    if not isinstance(content, (str, list)) or "role" not in message or "parts" in message:
        return message
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if not blocks or not isinstance(blocks[-1], dict):
        return message
    return {
        **message,
        "content": [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral"}}],
    }


def user_turn(dialect: str, text: str) -> dict:
    if dialect == "gemini":
        return {"role": "user", "parts": [{"text": text}]}
    return {"role": "user", "content": text}


def echoed(dialect: str, text: str) -> dict:
    """The reply as the client sends it back."""
    if dialect == "gemini":
        return {"role": "model", "parts": [{"text": text}]}
    if dialect == "responses":
        return {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text}],
        }
    if dialect == "anthropic":
        return {"role": "assistant", "content": [{"type": "text", "text": text}]}
    return {"role": "assistant", "content": text}


def run(dialect_name: str, agent_key: str, size: int, profile: bool) -> tuple[float, dict]:
    """CPU ms per call over CALLS calls on a session of ``size`` messages, and the
    round trips per call: in all, and before the forward."""
    from contextsvc.engine.providers.common import Reply, Usage
    from proxy.gate import read
    from proxy.providers import ANTHROPIC, GEMINI, OPENAI, RESPONSES
    from proxy.services.calls import prepare
    from proxy.services.reply import session_record_reply
    from proxy.services.responses import prepare_responses
    from proxy.upstream_json import SENT

    dialects = {"anthropic": ANTHROPIC, "openai": OPENAI, "responses": RESPONSES, "gemini": GEMINI}
    dialect = dialects[dialect_name]
    prepare_fn = prepare_responses if dialect_name == "responses" else prepare
    key = {"responses": "input", "gemini": "contents"}.get(dialect_name, "messages")
    headers = {"x-contextsvc-key": agent_key, "x-contextsvc-session": f"ses_{dialect_name}_{size}"}
    auth = {"anthropic": "x-api-key", "gemini": "x-goog-api-key"}.get(dialect_name)
    headers[auth or "authorization"] = "Bearer sk-up"
    messages = history(dialect_name, size)
    base = {"model": MODEL[dialect_name], "max_tokens": 500, "stream": True}
    if dialect_name == "responses":
        base = {"model": MODEL[dialect_name], "stream": True, "store": False}
    if dialect_name == "gemini":  # the model and the stream are the URL's, not the body's
        base = {"generationConfig": {"maxOutputTokens": 500}}

    class Request:
        """What the body gate reads of a request."""

        path = f"/proxy/{dialect_name}/v1/messages"

        def __init__(self, raw: bytes) -> None:
            self.body = raw
            self.headers = {"content-length": str(len(raw))}

    walls: list[float] = []

    def client_body() -> bytes:
        sent = [*messages[:-1], marked(messages[-1])] if MARKERS else messages
        return orjson.dumps({**base, key: sent})

    def one(n: int, raw: bytes, trips: RoundTrips | None = None) -> None:
        body = read(Request(raw), dialect)
        if dialect_name == "gemini":
            body = dialect.with_route(body, {"model": MODEL[dialect_name]})
        converted = dialect.envelope(body)
        wall = time.perf_counter()
        _, prepared = prepare_fn(dialect=dialect, headers=headers, body=body, converted=converted)
        walls.append(time.perf_counter() - wall)
        if trips is not None:
            trips.mark("forward")
            before.append((trips.total, trips.statements, trips.transactions))
        upstream, _ = dialect.streaming_body(prepared.body)
        session = prepared.session
        SENT.encode(upstream, dialect.messages_key, (session.pk, session.external_id))
        if prepared.record is not None:  # the relay writes it once upstream answered
            prepared.record()
        reply = Reply(
            message={"role": "assistant", "content": f"reply {n}"},
            usage=Usage(input_tokens=1000, output_tokens=10),
        )
        session_record_reply(
            session=prepared.session,
            dialect=dialect,
            reply=reply,
            response=None,
            synced=prepared.synced,
        )

    one(-1, client_body())  # the first sync
    # The second body scans the first for where its messages end (``body_reuse``:
    # once per conversation and process, not per call): not measured either.
    messages += [echoed(dialect_name, "reply -1"), user_turn(dialect_name, "warm")]
    one(-2, client_body())
    for hook in AFTER_FIRST_SYNC:
        hook()
    before: list[tuple[int, int, int]] = []
    trips = RoundTrips(trace=TRACE and size == HISTORIES[-1])
    profiler = cProfile.Profile() if profile else None
    cpu = 0.0
    prior = (0, 0, 0)
    pre = [0, 0, 0]
    raws = []  # the client's bodies, written before the measured calls (not proxy work)
    for n in range(CALLS):
        messages += [echoed(dialect_name, f"reply {n - 1}"), user_turn(dialect_name, f"turn {n}")]
        raws.append(client_body())
    instructions: list[int] = []
    with trips, counted() if COUNTING else nullcontext(instructions) as instructions:
        for n, raw in enumerate(raws):
            started = time.process_time()
            if profiler:
                profiler.enable()
            one(n, raw, trips)
            if profiler:
                profiler.disable()
            cpu += time.process_time() - started
            pre = [p + b - a for p, a, b in zip(pre, prior, before[-1], strict=True)]
            prior = (trips.total, trips.statements, trips.transactions)
            if trips.trace is not None and n == 0:
                print(f"  one {dialect_name} call at {size} messages:")
                print("\n".join("    " + line for line in trips.trace))
                trips.trace = None
    if profiler:
        stats = pstats.Stats(profiler).sort_stats(os.environ.get("BENCH_SORT", "cumulative"))
        stats.print_stats(int(os.environ.get("BENCH_LINES", "60")))
        if os.environ.get("BENCH_CALLERS"):  # who calls the functions matching it
            stats.print_callers(os.environ["BENCH_CALLERS"])
    counts = {
        "trips": trips.total / CALLS,
        "statements": trips.statements / CALLS,
        "transactions": trips.transactions / CALLS,
        "pre_trips": pre[0] / CALLS,
        "pre_statements": pre[1] / CALLS,
        "pre_transactions": pre[2] / CALLS,
        "pre_wall": sorted(walls[-CALLS:])[CALLS // 2] * 1000,
    }
    if COUNTING:  # millions of instructions per call, in place of CPU ms
        return instructions[0] / CALLS / 1e6, counts
    return cpu / CALLS * 1000, counts


def gemini_like_gpt_4o() -> None:
    """Gemini's model gets gpt-4o's profile (window, prices, caching minimum): its calls
    then do the same accounting work as Chat Completions', and 2,000 messages fit as
    they do for gpt-4o (its own profile, if seeded, is replaced)."""
    from sessions.models import ModelProfile

    row = ModelProfile.objects.get(provider="openai", model=MODEL["openai"])
    ModelProfile.objects.filter(provider="google", model=MODEL["gemini"]).delete()
    row.pk, row.provider, row.model = None, "google", MODEL["gemini"]
    row.save()


def main() -> None:
    rerun_under_callgrind()
    os.environ.update(OUT_OF_REACH)
    # A session's first sync at 2,000 messages compacts (a 128,000-token window); the
    # retention check of that compaction reads the recall index, slower with each
    # session the database holds: the call may wait for it (the measured calls never do).
    django_on_scratch_database("proxycpu", CONTEXTSVC_CONTEXT_WAIT_SECONDS="120")
    from sessions.services.keys import agent_key_create

    _, agent_key = agent_key_create(name="bench")
    gemini_like_gpt_4o()
    unit, short = ("M instructions (callgrind)", "MI") if COUNTING else ("CPU ms", "ms")
    print(
        f"per call, {CALLS} calls each: {unit} (the wall time of prepare alone); "
        "round trips / statements / transactions (before the forward / in all)"
    )
    cpus: dict[tuple[str, int], float] = {}
    for dialect in DIALECTS:
        figures = []
        for size in HISTORIES:
            profile = dialect == PROFILE and size == HISTORIES[-1]
            cpu, c = run(dialect, agent_key, size, profile)
            cpus[dialect, size] = cpu
            figures.append(
                f"{size:>5}: {cpu:6.2f} {short} (prepare wall p50 {c['pre_wall']:5.2f})  rt {c['pre_trips']:4.1f}/{c['trips']:4.1f}"
                f"  st {c['pre_statements']:4.1f}/{c['statements']:4.1f}"
                f"  tx {c['pre_transactions']:3.1f}/{c['transactions']:3.1f}"
            )
        ratio = cpus[dialect, HISTORIES[-1]] / cpus[dialect, HISTORIES[0]]
        print(
            f"  {dialect:>9}  " + "   ".join(figures) + f"  growth {ratio:.2f}×"
            f"  [load {os.getloadavg()[0]:.1f}]"
        )
    if "gemini" in DIALECTS and "openai" in DIALECTS:
        print(gemini_over_chat(cpus))


def gemini_over_chat(cpus: dict[tuple[str, int], float]) -> str:
    """Gemini's CPU per call over Chat Completions', per history (target ≤ 1.10)."""
    ratios = []
    for size in HISTORIES:
        ratio = cpus["gemini", size] / cpus["openai", size]
        verdict = "met" if ratio <= 1.1 else "MISSED"
        ratios.append(f"{size}: {ratio:.2f}× ({verdict})")
    return (
        "  Gemini / Chat Completions CPU per call (target ≤ 1.10×): "
        + ", ".join(ratios)
        + f"  [load {os.getloadavg()[0]:.1f}]"
    )


if __name__ == "__main__":
    main()
