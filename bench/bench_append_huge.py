"""One 30 MB append, what it costs the web process: CPU and wall time of
POST /sessions/{sid}/messages (body parse, NUL scan, counting, insert), with
the shipped per-request exact budget (the text gets the bounded estimate, the
exact count runs in a worker) beside the whole text counted exactly in the
request (CONTEXTSVC_EXACT_TOKEN_CHARS past the text: the way before). Then the
worker's exact count of that message (``message_count_exact``). Prints figures;
asserts nothing.

Such an append is over the API's JSON cap as shipped (CONTEXTSVC_MAX_API_JSON_BYTES,
4 MiB): it is refused 413 unread, and the first line says how fast. The cap
is raised past the size for the rest: what a deployment that raises it pays
for each big append (an agent sends a big output with the streamed upload
instead, bench_outputs.py).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/contextsvc python bench/bench_append_huge.py
    BENCH_HUGE_MB=8 python bench/bench_append_huge.py

Uses its own database (<name>_huge). In process, through Django's test client:
the web server's own cost (reading a socket) is not in it. Texts: one unbroken
word (the flood of the starvation test) and real agent text from
the workloads folder (``CONTEXTSVC_SHARED``) repeated to the size. The naive way — one encode of the
whole text — is in bench_tokens.py (minutes for the one word).
"""

from __future__ import annotations

import json
import os
import time

from common import (  # bench/ is sys.path[0]
    django_on_scratch_database,
    figure,
    huge_text,
    mb,
    recording,
)

SIZE = int(float(os.environ.get("BENCH_HUGE_MB", "30")) * 1_000_000)
ROUNDS = int(os.environ.get("BENCH_HUGE_ROUNDS", "3"))


def text_of(kind: str) -> str:
    return huge_text(kind, SIZE)


def main() -> None:
    # The per-key limits would refuse the repeats (128 MB a minute): off here.
    django_on_scratch_database(
        "_huge",
        CONTEXTSVC_RATE_LIMIT="off",
        CONTEXTSVC_RATE_LIMIT_MB="off",
        CONTEXTSVC_RATE_PACE="off",
        CONTEXTSVC_MAX_API_JSON_BYTES=str(2 * SIZE + (1 << 20)),
    )
    from django.conf import settings
    from django.test import Client

    from sessions.models import Message, Session
    from sessions.services.exact_counts import message_count_exact
    from sessions.services.keys import agent_key_create
    from sessions.services.sessions import session_create

    key, raw = agent_key_create(name="huge")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    shipped = settings.CONTEXTSVC_EXACT_TOKEN_CHARS
    if SIZE > 4 << 20:
        print(
            f"as shipped (JSON cap 4 MiB): refused 413 from its headers in "
            f"{refused_at_the_shipped_cap(settings):.0f} µs of the middleware, the body unread",
            flush=True,
        )
    print(f"one {mb(SIZE)} append, best of {ROUNDS} (CPU of this process; wall)", flush=True)
    for kind in ("one-word", "real text"):
        body = json.dumps({"messages": [{"role": "user", "content": text_of(kind)}]}).encode()
        figures = {}
        for how, budget in (("estimate", shipped), ("exact", SIZE * 2)):
            settings.CONTEXTSVC_EXACT_TOKEN_CHARS = budget
            best = None
            for n in range(ROUNDS):
                sid = f"{kind[:4]}-{how}-{n}"
                session_create(owner=key, data={"model": "claude-sonnet-4-5", "id": sid})
                cpu, wall = time.process_time(), time.perf_counter()
                response = client.post(
                    f"/api/v1/sessions/{sid}/messages", body, content_type="application/json"
                )
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                assert response.status_code == 200, response.content[:300]
                message = response.json()["messages"][0]
                if best is None or cpu < best[0]:
                    best = (cpu, wall, message)
            figures[how] = best
            cpu, wall, message = best
            flag = " (estimated)" if message["token_count_estimated"] else ""
            figure(
                f"  {kind:9} {how:8}: {cpu:6.3f} s CPU, {wall:6.3f} s wall, "
                f"{message['token_count']:,} tokens{flag}",
                flush=True,
            )
        settings.CONTEXTSVC_EXACT_TOKEN_CHARS = shipped
        est, exact = figures["estimate"], figures["exact"]
        session = Session.objects.get(external_id=f"{kind[:4]}-estimate-0")
        seq = est[2]["seq"]
        cpu, wall = time.process_time(), time.perf_counter()
        outcome = message_count_exact(session_id=session.pk, seq=seq)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        counted = Message.objects.get(session=session, seq=seq).token_count
        figure(
            f"  {kind}, estimate vs exact: request CPU {exact[0] / est[0]:.0f}x less with the estimate; estimate "
            f"{100 * (est[2]['token_count'] - counted) / counted:+.1f} % of the exact count; "
            f"the worker's exact count: {cpu:.3f} s CPU, {wall:.3f} s wall ({outcome})",
            flush=True,
        )


def refused_at_the_shipped_cap(settings) -> float:
    """The 413 of a SIZE append under the shipped cap, as the server's middleware
    answers it from the headers (the test client would copy the body first): µs,
    best of 1,000."""
    from django.test import RequestFactory

    from contextsvc.bodycap import JsonBodyCapMiddleware

    cap = JsonBodyCapMiddleware(lambda request: None)
    raised, settings.CONTEXTSVC_MAX_API_JSON_BYTES = settings.CONTEXTSVC_MAX_API_JSON_BYTES, 4 << 20
    best = float("inf")
    try:
        for _ in range(1000):
            request = RequestFactory().post("/api/v1/sessions/capped/messages", b"", "text/plain")
            request.META["CONTENT_LENGTH"] = str(SIZE)
            started = time.perf_counter()
            response = cap(request)
            best = min(best, (time.perf_counter() - started) * 1e6)
            assert response.status_code == 413
    finally:
        settings.CONTEXTSVC_MAX_API_JSON_BYTES = raised
    return best


if __name__ == "__main__":
    with recording(__file__):
        main()
