"""What the per-key limiter adds to every API call: admit + release, timed.
Prints figures; asserts nothing.

    REDIS_URL=redis://127.0.0.1:6379/0 python bench/bench_ratelimit.py

The shipped limits (two request rates, body megabytes, a concurrency slot) in
process memory, and in Redis when REDIS_URL is set (what production uses).
"""

from __future__ import annotations

import os
import time
import uuid

import django
from common import ROOT, figure, pct, recording  # noqa: F401  (bench/ is sys.path[0]; common puts ROOT on sys.path)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextsvc.settings")
django.setup()

from django.conf import settings  # noqa: E402

from contextsvc.ratelimit import KeyLimiter, RateLimited, get_limiter  # noqa: E402
from contextsvc.ratelimit.wsgi import RefuseFloodingKeys  # noqa: E402

N = 3000


def main() -> None:
    storages = ["memory://"] + ([os.environ["REDIS_URL"]] if os.environ.get("REDIS_URL") else [])
    for storage in storages:
        limiter = KeyLimiter(
            storage,
            "100000000/minute",  # the shipped shape (one rate), never reached here
            settings.CONTEXTSVC_MAX_CONCURRENT_PER_KEY,
            settings.CONTEXTSVC_CONCURRENCY_LEASE_SECONDS,
            body_rates=settings.CONTEXTSVC_RATE_LIMIT_MB,
            web_threads=2,
            max_heavy=settings.CONTEXTSVC_MAX_HEAVY_PER_KEY,
            # The shipped burst, at a pace never reached here: its cost is timed.
            pace="1000000/second",
            burst=settings.CONTEXTSVC_RATE_BURST,
        )
        key = uuid.uuid4().hex
        times = []
        for _ in range(N):
            start = time.perf_counter()
            limiter.admit(key).release()
            times.append((time.perf_counter() - start) * 1e6)
        figure(
            f"admit + release, {storage.split(':')[0]}: p50 {pct(times, 0.5):.0f} µs, "
            f"p99 {pct(times, 0.99):.0f} µs over {N} calls"
        )
    refused_in_front_of_django()


def refused_in_front_of_django() -> None:
    """A known-flooding key's request answered by the WSGI wrapper: CPU per call."""
    limiter, key = get_limiter(), uuid.uuid4().hex
    if limiter is None:
        return
    try:  # past the key's request rate, so that this process remembers it
        for _ in range(100_000):
            limiter.admit(key).release() if limiter.holds_slots else limiter.admit(key)
    except RateLimited:
        pass
    wrapper = RefuseFloodingKeys(lambda environ, start: [b""], lambda token: key)
    environ = {
        "PATH_INFO": "/api/v1/sessions/s/messages",
        "HTTP_AUTHORIZATION": "Bearer cx_x",
        "CONTENT_LENGTH": "30000000",
    }
    start = time.process_time()
    for _ in range(N):
        wrapper(dict(environ), lambda status, headers: None)
    per_call = (time.process_time() - start) / N * 1e6
    figure(f"refused in front of Django (WSGI wrapper): {per_call:.0f} µs of CPU per request")


if __name__ == "__main__":
    with recording(__file__):
        main()
