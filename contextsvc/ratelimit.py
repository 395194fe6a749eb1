"""Per-agent-key rate and concurrency limits, so that no key can starve the others.

Rates come from the ``limits`` library (sliding window counter; Redis shared by
every gunicorn worker when REDIS_URL is set, process memory otherwise — exact
for the quick start's single process). ``limits`` has no concurrency primitive,
so concurrent requests are counted here as leases in the same storage: a Redis
sorted set scored by expiry (a request killed with its worker frees its slot
when the lease lapses), or a dict in process memory.

The global count alone cannot keep a worker free: an agent's keep-alive
connection stays with the gunicorn worker that accepted it, so a key holding
every thread of one worker stalls every other key connected there, whatever
its total. So a key may also never hold all of one process's web threads
(``web_threads``, told by gunicorn.conf.py's post_fork hook): one stays free.

A key over a limit gets a 429 (``RateLimited``) with ``Retry-After``. The
limiter fails open: if its storage is unreachable the request goes through
(a limit protects the others; it must not become an outage of its own).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import limits
from django.conf import settings
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse
from limits.storage import RedisStorage, storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter

from contextsvc.errors import ServiceError

logger = logging.getLogger(__name__)

# After a storage error the limiter stands aside this long instead of paying a
# timeout on every request while Redis is down.
STORAGE_RETRY_SECONDS = 5.0
# Nobody can tell when one of a key's running requests will end: ask for a second.
CONCURRENCY_RETRY_AFTER = 1

# Atomic in Redis: drop lapsed leases, take a slot if one is free. TIME is the
# server's clock, so workers on hosts with skewed clocks agree on expiry.
_ACQUIRE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
return 1
"""


class RateLimited(ServiceError):
    code, status = "RATE_LIMITED", 429

    def __init__(self, message: str, *, retry_after: int, details: dict[str, Any]) -> None:
        super().__init__(message, details={**details, "retry_after": retry_after})
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Slot:
    """A concurrency lease held by one request; ``release`` gives it back."""

    limiter: KeyLimiter
    identity: str
    token: str

    def release(self) -> None:
        self.limiter.release(self)


class KeyLimiter:
    """Rate limits (``limits`` notation, e.g. "50/second;1500/minute"), megabytes
    of request bodies per period (``body_rates``, same notation), and at most
    ``max_concurrent`` requests in flight per identity (0 turns that off), of
    which at most ``web_threads - 1`` in this process (when it has 2 or more)."""

    def __init__(
        self,
        storage_uri: str,
        rates: str,
        max_concurrent: int,
        lease_seconds: float,
        *,
        body_rates: str = "off",
        web_threads: int = 0,
        timeout: float = 0.5,
    ) -> None:
        options = {} if storage_uri.startswith("memory") else {"socket_timeout": timeout}
        if storage_uri.startswith("redis"):
            options["socket_connect_timeout"] = timeout
        self.storage = storage_from_string(storage_uri, **options)
        self.rates = parse_rates(rates)
        self.body_rates = parse_rates(body_rates)
        self.strategy = SlidingWindowCounterRateLimiter(self.storage)
        self.max_concurrent = max_concurrent
        self.process_cap = web_threads - 1 if max_concurrent and web_threads >= 2 else 0
        self.lease_seconds = lease_seconds
        self._in_process: dict[str, int] = {}
        self._down_until = 0.0
        self._local: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._acquire_script = None
        if isinstance(self.storage, RedisStorage):
            self._acquire_script = self.storage.storage.register_script(_ACQUIRE)

    def admit(self, identity: str, megabytes: int = 0) -> Slot | None:
        """Count one request of ``identity`` with a body of ``megabytes``; its slot
        (if concurrency is limited).

        Raises ``RateLimited`` when a rate or a concurrency limit is reached.
        """
        if not self._enter_process(identity):
            raise self._busy(
                f"{self.process_cap} concurrent requests on one server worker",
                "this agent key would take every thread of this server worker",
            )
        token = ""  # a lease in the shared storage, when one is taken
        try:
            if time.monotonic() >= self._down_until:
                token = uuid.uuid4().hex if self.max_concurrent else ""
                self._count(identity, token, megabytes)
        except RateLimited:
            self._leave_process(identity)
            raise
        except Exception:  # any storage failure: stand aside (fail open)
            self._storage_failed("admit")
            token = ""  # no lease to give back (one taken lapses on its own)
        return Slot(self, identity, token) if self.max_concurrent else None

    def _count(self, identity: str, token: str, megabytes: int) -> None:
        for item in self.rates:
            if not self.strategy.hit(item, identity):
                retry = self._retry_after(item, identity)
                raise RateLimited(
                    f"Too many requests for this agent key (limit {item}); retry in {retry} s",
                    retry_after=retry,
                    details={"limit": str(item), "scope": "rate"},
                )
        # Big bodies cost CPU by the megabyte (parsing, counting tokens): a key
        # posting 30 MB appends in a loop passes every request rate yet would
        # keep cores busy. One body never costs more than a whole period's
        # budget, so any body the size limits allow can pass on a fresh budget.
        for item in self.body_rates if megabytes else ():
            if not self.strategy.hit(item, identity, "mb", cost=min(megabytes, item.amount)):
                retry = self._retry_after(item, identity, "mb")
                limit = f"{item.amount} MB of request bodies per {item.multiples} {item.GRANULARITY.name}"
                raise RateLimited(
                    f"Too much data from this agent key (limit {limit}); retry in {retry} s",
                    retry_after=retry,
                    details={"limit": limit, "scope": "body_rate"},
                )
        if token and not self._acquire(identity, token):
            raise self._busy(
                f"{self.max_concurrent} concurrent requests",
                f"this agent key already has {self.max_concurrent} requests in progress",
            )

    def release(self, slot: Slot) -> None:
        self._leave_process(slot.identity)
        if not slot.token:
            return
        try:
            if self._acquire_script is not None:
                self.storage.storage.zrem(self._slots_key(slot.identity), slot.token)
            else:
                with self._lock:
                    self._local.get(slot.identity, {}).pop(slot.token, None)
        except Exception:  # the lease lapses on its own
            self._storage_failed("release")

    def in_flight(self, identity: str) -> int:
        """Requests of ``identity`` holding a slot now (for tests and operators)."""
        if self._acquire_script is not None:
            return int(self.storage.storage.zcard(self._slots_key(identity)))
        with self._lock:
            return len(self._live(identity))

    def _retry_after(self, item: limits.RateLimitItem, *identifiers: str) -> int:
        reset = self.strategy.get_window_stats(item, *identifiers).reset_time
        return max(1, math.ceil(reset - time.time()))

    @staticmethod
    def _busy(limit: str, why: str) -> RateLimited:
        return RateLimited(
            f"Too many concurrent requests: {why}; retry in {CONCURRENCY_RETRY_AFTER} s",
            retry_after=CONCURRENCY_RETRY_AFTER,
            details={"limit": limit, "scope": "concurrency"},
        )

    def _enter_process(self, identity: str) -> bool:
        if not self.process_cap:
            return True
        with self._lock:
            held = self._in_process.get(identity, 0)
            if held >= self.process_cap:
                return False
            self._in_process[identity] = held + 1
            return True

    def _leave_process(self, identity: str) -> None:
        if not self.process_cap:
            return
        with self._lock:
            held = self._in_process.get(identity, 0) - 1
            if held > 0:
                self._in_process[identity] = held
            else:
                self._in_process.pop(identity, None)

    def _acquire(self, identity: str, token: str) -> bool:
        if self._acquire_script is not None:
            keys = [self._slots_key(identity)]
            args = [self.max_concurrent, self.lease_seconds, token]
            return bool(self._acquire_script(keys=keys, args=args))
        with self._lock:
            live = self._live(identity)
            if len(live) >= self.max_concurrent:
                return False
            live[token] = time.monotonic() + self.lease_seconds
            return True

    def _live(self, identity: str) -> dict[str, float]:
        now = time.monotonic()
        live = {t: exp for t, exp in self._local.get(identity, {}).items() if exp > now}
        self._local[identity] = live
        return live

    def _slots_key(self, identity: str) -> str:
        return f"{self.storage.key_prefix}:contextsvc:inflight:{identity}"

    def _storage_failed(self, what: str) -> None:
        self._down_until = time.monotonic() + STORAGE_RETRY_SECONDS
        logger.warning(
            "rate limiter storage failed in %s; limits off for %.0f s",
            what,
            STORAGE_RETRY_SECONDS,
            exc_info=True,
        )


def parse_rates(rates: str) -> list[limits.RateLimitItem]:
    """``"50/second;1500/minute"`` as limit items; "", "off" or "0" means none."""
    text = (rates or "").strip().lower()
    if text in ("", "off", "none", "0"):
        return []
    return limits.parse_many(text)


_build_lock = threading.Lock()


def get_limiter() -> KeyLimiter | None:
    """The process's limiter from settings (None when both limits are off)."""
    # Built once under a lock: the first requests arrive on several threads at
    # once, and limits' lazy dependency check is not safe to run concurrently
    # (it reported redis as version 0.0.0 to one of them).
    with _build_lock:
        return _build_limiter()


@lru_cache(maxsize=1)
def _build_limiter() -> KeyLimiter | None:
    rates = parse_rates(settings.CONTEXTSVC_RATE_LIMIT)
    body_rates = parse_rates(settings.CONTEXTSVC_RATE_LIMIT_MB)
    if not rates and not body_rates and not settings.CONTEXTSVC_MAX_CONCURRENT_PER_KEY:
        return None
    return KeyLimiter(
        settings.CONTEXTSVC_RATE_LIMIT_STORAGE,
        settings.CONTEXTSVC_RATE_LIMIT,
        settings.CONTEXTSVC_MAX_CONCURRENT_PER_KEY,
        settings.CONTEXTSVC_CONCURRENCY_LEASE_SECONDS,
        body_rates=settings.CONTEXTSVC_RATE_LIMIT_MB,
        web_threads=settings.CONTEXTSVC_WEB_THREADS,
    )


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith(
        ("CONTEXTSVC_RATE_LIMIT", "CONTEXTSVC_MAX_CONCURRENT", "CONTEXTSVC_CONC")
    ):
        _build_limiter.cache_clear()


setting_changed.connect(_settings_changed)


def admit_key(request: HttpRequest, identity: str) -> None:
    """Admit an authenticated agent key's request; ``RateLimitMiddleware`` releases it."""
    limiter = get_limiter()
    if limiter is not None:
        try:
            size = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            size = 0
        # Whole megabytes: the calls an agent makes all the time cost nothing here.
        request.contextsvc_slot = limiter.admit(identity, size // 1_000_000)


class RateLimitMiddleware:
    """Gives back the request's concurrency slot once its response is sent.

    The release is a Redis round trip: run it when the server closes the
    response (after the last byte went out), so the agent never waits for it.
    A response that is never built (an exception past every handler) releases
    at once.
    """

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = None
        try:
            response = self.get_response(request)
            return response
        finally:
            slot = getattr(request, "contextsvc_slot", None)
            if slot is not None:
                if response is None:
                    slot.release()
                else:
                    # Django's own hook for work at close() (FileResponse closes
                    # its file there); the WSGI server calls close() after sending.
                    response._resource_closers.append(slot.release)
