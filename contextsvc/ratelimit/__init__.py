"""Per-agent-key limits, bound to the settings and the request cycle: the
process's limiter, the checks the auth layer calls, and the middleware that
gives a request's slot back before its response is sent. The limiter itself is ``limiter.py``."""

from __future__ import annotations

import operator
import threading
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.functional import empty

from .hold import hold
from .limiter import KeyLimiter, RateLimited, Slot, parse_rates

__all__ = [
    "KeyLimiter",
    "RateLimitMiddleware",
    "RateLimited",
    "Slot",
    "admit_key",
    "count_key",
    "get_limiter",
    "hold_refused",
    "parse_rates",
    "refuse_flooding_key",
]

_build_lock = threading.Lock()

# What the limiter is built from. The cache is keyed on their values, so the
# limiter in use is always the one of the settings in force: no signal to miss,
# no build finished on another thread after the settings changed.
_BUILT_FROM = (
    "CONTEXTSVC_RATE_LIMIT_STORAGE",
    "CONTEXTSVC_RATE_LIMIT",
    "CONTEXTSVC_MAX_CONCURRENT_PER_KEY",
    "CONTEXTSVC_CONCURRENCY_LEASE_SECONDS",
    "CONTEXTSVC_RATE_LIMIT_MB",
    "CONTEXTSVC_WEB_THREADS",
    "CONTEXTSVC_KEEP_THREAD_FREE",
    "CONTEXTSVC_WEB_KEEPALIVE",
    "CONTEXTSVC_MAX_HEAVY_PER_KEY",
    "CONTEXTSVC_RATE_PACE",
    "CONTEXTSVC_RATE_BURST",
)


_read_settings = operator.attrgetter(*_BUILT_FROM)


def get_limiter() -> KeyLimiter | None:
    """The process's limiter from settings (None when both limits are off)."""
    # Read off the settings object itself: each read through the lazy proxy
    # runs its Python hook, and this runs up to three times per API call.
    wrapped = settings._wrapped
    values = _read_settings(settings if wrapped is empty else wrapped)
    # Built once under a lock: the first requests arrive on several threads at
    # once, and limits' lazy dependency check is not safe to run concurrently
    # (it reported redis as version 0.0.0 to one of them).
    with _build_lock:
        return _build_limiter(values)


@lru_cache(maxsize=1)
def _build_limiter(values: tuple[Any, ...]) -> KeyLimiter | None:
    (storage, rates, concurrent, lease, body_rates, threads, keep_free, keepalive, heavy,
     pace, burst) = values  # fmt: skip
    limiter = KeyLimiter(
        storage,
        rates,
        concurrent,
        lease,
        body_rates=body_rates,
        web_threads=threads,
        keep_thread_free=keep_free,
        recent_seconds=keepalive,
        max_heavy=heavy,
        pace=pace,
        burst=burst,
    )
    if not (limiter.rates or limiter.body_rates or limiter.pacer or limiter.holds_slots):
        return None
    return limiter


def _body_size(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def hold_refused(refusal: RateLimited) -> None:
    """Leave the refused request's connection unread for its Retry-After (at
    most ``CONTEXTSVC_REFUSAL_HOLD_SECONDS``): a flood that ignores it waits
    anyway, and costs the server no parsing meanwhile (``hold.py``)."""
    hold(min(refusal.retry_after, settings.CONTEXTSVC_REFUSAL_HOLD_SECONDS))


def refuse_flooding_key(request: HttpRequest, identity: str) -> None:
    """Before the key is looked up: a key this process just refused for a rate
    is refused again at once (a flood's retries cost no query, no round trip).
    A bad key never gets here refused, so it stays a 401."""
    limiter = get_limiter()
    if limiter is not None:
        size = _body_size(request)
        heavy = size >= settings.CONTEXTSVC_HEAVY_BODY_BYTES
        limiter.refuse_known(identity, size // 1_000_000, heavy=heavy)


def admit_key(request: HttpRequest, identity: str) -> None:
    """Admit an authenticated agent key's request; ``RateLimitMiddleware`` releases it."""
    limiter = get_limiter()
    if limiter is not None:
        size = _body_size(request)
        # Whole megabytes: the calls an agent makes all the time cost nothing here.
        request.contextsvc_slot = limiter.admit(
            identity, size // 1_000_000, heavy=size >= settings.CONTEXTSVC_HEAVY_BODY_BYTES
        )


def count_key(identity: str) -> None:
    """Count a request of an authenticated key against its request rates, holding
    no slot: the proxy's calls (``KeyLimiter.count``). Raises ``RateLimited``.

    Not against the body megabytes: a proxied body is the client's whole
    history by design (the proxy appends only what is new), so an agent's
    ordinary loop would exhaust a budget meant for appends."""
    limiter = get_limiter()
    if limiter is not None:
        limiter.refuse_known(identity)
        limiter.count(identity)


class RateLimitMiddleware:
    """Gives back the request's slot once its response is built, before it is sent.

    Before, not after: a client sees the response only once it is sent, so its
    next request (on this connection or a new one, on another thread) never
    finds the finished one still holding the key's share of the worker.
    Giving back the thread share costs nothing (process memory); a shared
    lease (the global count, a big body's) is a round trip, paid only by the
    requests that took one.
    """

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return self.get_response(request)
        finally:
            slot = getattr(request, "contextsvc_slot", None)
            if slot is not None:
                slot.release()
