"""A proxied call's side-by-side: what it costs to keep, and to show. Prints figures; asserts nothing.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_call_detail.py

On its own database (<name>_calldetail), with the fake Anthropic upstream and
the proxy in this process (the ASGI application, the official SDK), sessions
of BENCH_SIZES (200, 2,000) messages are built through the proxy itself: one
call carries the history, a second call adds a turn. Every 20th message is a
3,000-line tool output, sent as a view. Then:

1. The call detail page (the inspector's, as htmx asks for it) and
   ``GET /api/v1/sessions/{sid}/calls/{id}``: server time p50 / p99 and the
   number of queries, per session size (target: ≤ 100 ms at 2,000 messages,
   the same number of queries at every size).
2. The account of the client's request (``call_account``, worked out after the
   first byte, with the build's record) for the last call: time per call, and
   beside it the naive way — a digest of every message of the client's request,
   which is what a per-message record of the request would cost.
3. The size of the record's account in the database (the JSON as stored).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from functools import partial

from common import django_on_scratch_database, drop_database, figure, pct, recording

from fakes.anthropic_server import FakeAnthropic
from fakes.streams import ScriptedReply, tool_call

SIZES = [int(n) for n in os.environ.get("BENCH_SIZES", "200,2000").split(",")]
REPEAT = int(os.environ.get("BENCH_REPEAT", "40"))
KEY = "sk-bench-upstream"
MODEL = "claude-opus-4-5"
BIG = "\n".join(f"{i:05d} " + "x" * 60 for i in range(3000))


def history(messages: int) -> list[dict]:
    """A coding agent's history: a Bash call and its output per turn, a big one every 20."""
    out: list[dict] = [{"role": "user", "content": "fix the parser"}]
    n = 0
    while len(out) < messages - 1:
        out.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"step {n}: running the tests again"},
                    {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash",
                     "input": {"command": f"pytest -k case_{n}"}},
                ],
            }
        )  # fmt: skip
        output = BIG if n % 10 == 9 else f"case_{n}: 1 passed in 0.{n % 90:02d}s"
        out.append(
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": output}]}
        )  # fmt: skip
        n += 1
    return out[: messages - 1]


async def drive(key: str, sid: str, messages: list[dict]) -> list[dict]:
    import anthropic
    import httpx2

    from contextsvc.asgi import application

    client = anthropic.AsyncAnthropic(
        base_url="http://localhost/proxy/anthropic",
        api_key=KEY,
        default_headers={"X-Contextsvc-Key": key, "X-Contextsvc-Session": sid},
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=application)),
        max_retries=0,
    )
    tools = [{"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}}]
    system = [{"type": "text", "text": "You are a careful coding agent.",
               "cache_control": {"type": "ephemeral"}}]  # fmt: skip
    body = {"model": MODEL, "max_tokens": 1000, "tools": tools, "system": system}
    reply = await client.messages.create(messages=messages, **body)
    messages = [
        *messages,
        {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_last",
                                      "content": "done"}]},
    ]  # fmt: skip
    await client.messages.create(messages=messages, **body)
    return messages


def timed(fn, repeat: int) -> tuple[list[float], int]:
    from django.db import connection

    fn()  # warm
    times = []
    queries: list[str] = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        fn()
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times, len(queries)


def main() -> None:
    fake = FakeAnthropic(api_key=KEY).start()
    db_url = django_on_scratch_database(
        "calldetail",
        CONTEXTSVC_UPSTREAM_ANTHROPIC_URL=fake.base_url,
        DEBUG="false",
        CONTEXTSVC_RATE_LIMIT="off",
        CONTEXTSVC_RATE_LIMIT_MB="off",
        CONTEXTSVC_RATE_PACE="off",
    )
    try:
        run(fake)
    finally:
        fake.stop()
        drop_database(db_url)


def run(fake: FakeAnthropic) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from contextsvc.engine import request_account
    from proxy.providers import ANTHROPIC
    from proxy.services.account import call_account, client_side
    from proxy.services.sync import Synced
    from sessions.models import ContextCall, Session
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    owner, key = agent_key_create(name="bench")
    staff = get_user_model().objects.create_user(username="op", password="x", is_staff=True)
    page = Client()
    page.force_login(staff)
    api = Client(headers={"Authorization": f"Bearer {key}"})
    print(f"call detail and its account; {REPEAT} requests per figure, server time in-process")
    for size in SIZES:
        sid = f"detail-{size}"
        data = {"id": sid, "model": MODEL, "context_window": 1_000_000, "max_output_tokens": 1000}
        session_create(owner=owner, data=data)
        fake.script(ScriptedReply(text="on it", tool_calls=[tool_call("Bash", {}, id="toolu_last")]),
                    ScriptedReply(text="fixed"))  # fmt: skip
        start = time.perf_counter()
        sent_messages = asyncio.run(drive(key, sid, history(size)))
        built = time.perf_counter() - start
        session = Session.objects.get(external_id=sid)
        call = ContextCall.objects.filter(session=session).latest("id")
        views = sum(len(p) for p in call.breakdown["sent"]["views"].values())
        url = reverse("dashboard:session_call", args=[session.pk, call.pk])
        html, html_q = timed(lambda u=url: page.get(u, headers={"HX-Request": "true"}), REPEAT)
        one = f"/api/v1/sessions/{sid}/calls/{call.pk}"
        rest, rest_q = timed(lambda u=one: api.get(u), REPEAT)
        print(f"\n{session.last_seq:,} messages ({views} view runs), built through the proxy in "
              f"{built:.1f} s")  # fmt: skip
        figure(f"  call detail page, {size:,} messages: p50 {statistics.median(html):.1f} ms, p99 "
               f"{pct(html, 0.99):.1f} ms, {html_q} queries (target ≤ 100 ms)")  # fmt: skip
        figure(f"  GET calls/{{id}}, {size:,} messages: p50 {statistics.median(rest):.1f} ms, p99 "
               f"{pct(rest, 0.99):.1f} ms, {rest_q} queries")  # fmt: skip

        # The account, as the record computes it, beside a digest per client message.
        body = {"model": MODEL, "max_tokens": 1000, "messages": sent_messages,
                "tools": fake.messages_requests()[-1].body.get("tools") or []}  # fmt: skip
        converted = ANTHROPIC.envelope(body)
        upstream = fake.messages_requests()[-1].body
        side = client_side(body=body, messages=len(sent_messages), synced=Synced(2, False),
                           session=session, same=len(sent_messages) - 2)  # fmt: skip
        ours = [timed_once(partial(call_account, side, converted, upstream, final=False))
                for _ in range(REPEAT)]  # fmt: skip
        per_message = partial(digest_each, request_account.digest, sent_messages)
        naive = [timed_once(per_message) for _ in range(5)]
        size_json = len(json.dumps(call.request)) + len(json.dumps(call.breakdown["sent"]))
        figure(f"  the account per call, {size:,} messages: p50 {statistics.median(ours):.2f} ms; "
               f"naive (a digest per message) {statistics.median(naive):.1f} ms, "
               f"×{statistics.median(naive) / statistics.median(ours):.0f}")  # fmt: skip
        figure(f"  kept per call, {size:,} messages: {size_json / 1024:.1f} KiB of JSON "
               "(account + runs)")  # fmt: skip


def digest_each(digest, messages: list[dict]) -> list[str]:
    return [digest(m) for m in messages]


def timed_once(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


if __name__ == "__main__":
    with recording(__file__):
        main()
