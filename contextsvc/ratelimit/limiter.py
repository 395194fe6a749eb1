"""Per-agent-key rate and concurrency limits, so that no key can starve the others.

Rates come from the ``limits`` library (sliding window counter; Redis shared by
every gunicorn worker when REDIS_URL is set, process memory otherwise), one
round trip per *batch*: each process takes a few tokens at a time from the
shared window (at most 1 % of the limit), and near the limit one at a time
(exact). Past a burst a key is also paced to a steady rate, in process memory
(``pacing.py``), so that it cannot spend a minute's window in seconds.

Requests in flight (``limits`` has no concurrency primitive) are leases in the
same storage: a Redis sorted set scored by expiry (a request killed with its
worker frees its slot when the lease lapses), or a dict in process memory. A
key never holds every one of a process's ``web_threads`` while another key is
there to need one (``share.py``; told by gunicorn.conf.py's post_fork hook; in
process memory, free). The global count (``max_concurrent``) is a round trip
per request, off by default. A big body
costs CPU by the megabyte: a key has at most ``max_heavy`` requests with a
body of ``heavy_bytes`` or more in flight, so its uploads take that many cores.

A key over a limit gets a 429 (``RateLimited``) with ``Retry-After``; what a
process knows it would refuse it refuses before any lookup (``refuse_known``,
also from the WSGI wrapper in ``wsgi.py``, before the body is read). The
limiter fails open: if its storage is unreachable the request goes through.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import limits
from limits.storage import RedisStorage, storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter

from .pacing import Pacer
from .rates import RateLimited, parse_rates, too_many_at_once
from .share import ThreadShare

logger = logging.getLogger(__name__)

# After a storage error the limiter stands aside this long instead of paying a
# timeout on every request while Redis is down.
STORAGE_RETRY_SECONDS = 5.0
# Rate tokens taken in a batch are spent within this share of the window, so
# the shared count never runs far ahead of (or behind) the requests it counts.
TOKEN_LIFETIME_SHARE = 0.1
MAX_TOKEN_BATCH = 20
# A key this process refused for a rate is refused again at once, before its
# key is even looked up, for at most this long: a flood's retries then cost
# next to nothing, and the shared window is asked again every second.
REFUSAL_MEMORY_SECONDS = 1.0
# A big body refused because another process serves the key's big one: its
# next ones here are refused unread for this long (then Redis is asked again).
HEAVY_REFUSAL_MEMORY_SECONDS = 0.5

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


@dataclass(frozen=True, slots=True)
class Slot:
    """What one admitted request holds (its share of this process's threads,
    leases in the shared storage); ``release`` gives it back."""

    limiter: KeyLimiter
    identity: str
    token: str  # the global concurrency lease, or ""
    heavy_token: str = ""  # the big-body lease, or ""

    def release(self) -> None:
        self.limiter.release(self)


class KeyLimiter:
    """Rate limits (``limits`` notation, e.g. "50/second;1500/minute"), megabytes
    of request bodies per period (``body_rates``, same notation), at most
    ``web_threads - 1`` requests in flight per identity in this process while
    another identity is served here or was within ``recent_seconds`` (when it
    has 2 or more threads and ``keep_thread_free``), at most ``max_concurrent``
    in flight across processes (0: no global count), and at most ``max_heavy``
    of those with a big body (0: no limit)."""

    def __init__(
        self,
        storage_uri: str,
        rates: str,
        max_concurrent: int,
        lease_seconds: float,
        *,
        body_rates: str = "off",
        web_threads: int = 0,
        keep_thread_free: bool = True,
        recent_seconds: float = 15.0,
        max_heavy: int = 0,
        pace: str = "off",
        burst: int = 0,
        timeout: float = 0.5,
    ) -> None:
        options = {} if storage_uri.startswith("memory") else {"socket_timeout": timeout}
        if storage_uri.startswith("redis"):
            options["socket_connect_timeout"] = timeout
        self.storage = storage_from_string(storage_uri, **options)
        self.rates = parse_rates(rates)
        self.body_rates = parse_rates(body_rates)
        paces = parse_rates(pace)
        self.pacer = Pacer(paces[0], burst) if paces and burst > 0 else None
        self.strategy = SlidingWindowCounterRateLimiter(self.storage)
        self.max_concurrent = max_concurrent
        self.max_heavy = max_heavy
        self.process_cap = web_threads - 1 if keep_thread_free and web_threads >= 2 else 0
        self.share = ThreadShare(self.process_cap, recent_seconds) if self.process_cap else None
        self.lease_seconds = lease_seconds
        self._heavy_here: dict[str, int] = {}  # big-body leases held in this process
        self._down_until = 0.0
        self._local: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._acquire_script = None
        # Process memory is as cheap as a local batch: batches are for Redis.
        self._batched = isinstance(self.storage, RedisStorage)
        self._tokens: dict[tuple[str, str], tuple[int, float]] = {}
        # (identity, scope) -> (ask again after, retry after, the refusal's details)
        self._refused: dict[tuple[str, str], tuple[float, float, dict[str, Any]]] = {}
        if self._batched:
            self._acquire_script = self.storage.storage.register_script(_ACQUIRE)

    @property
    def holds_slots(self) -> bool:
        """Whether admitted requests hold anything ``release`` must give back."""
        return bool(self.process_cap or self.max_concurrent or self.max_heavy)

    def admit(self, identity: str, megabytes: int = 0, *, heavy: bool = False) -> Slot | None:
        """Count one request of ``identity`` with a body of ``megabytes`` (``heavy``:
        a big one); its slot (None when nothing is held).

        Raises ``RateLimited`` when a rate or a concurrency limit is reached.
        """
        if not self._enter_process(identity):
            raise self._process_busy()
        token = heavy_token = ""  # leases in the shared storage, when taken
        try:
            self._pace(identity)  # in memory: whether or not the storage is up
            if time.monotonic() >= self._down_until:
                token = uuid.uuid4().hex if self.max_concurrent else ""
                heavy_token = uuid.uuid4().hex if heavy and self.max_heavy else ""
                self._count(identity, megabytes)
                self._lease(identity, token, heavy_token)
                if heavy_token:
                    with self._lock:
                        self._heavy_here[identity] = self._heavy_here.get(identity, 0) + 1
        except RateLimited:
            self._leave_process(identity)
            raise
        except Exception:  # any storage failure: stand aside (fail open)
            self._storage_failed("admit")
            token = heavy_token = ""  # nothing to give back (a lease taken lapses)
        return Slot(self, identity, token, heavy_token) if self.holds_slots else None

    def count(self, identity: str, megabytes: int = 0) -> None:
        """Count one request against the rates only, holding no slot (a proxied
        stream lasts minutes; in-flight caps are the REST workers' threads).

        Raises ``RateLimited`` over a rate; a storage failure stands aside, as ``admit``.
        """
        self._pace(identity)
        if time.monotonic() < self._down_until:
            return
        try:
            self._count(identity, megabytes)
        except RateLimited:
            raise
        except Exception:  # any storage failure: stand aside (fail open)
            self._storage_failed("admit")

    def refuse_known(self, identity: str, megabytes: int = 0, *, heavy: bool = False) -> None:
        """Raise ``RateLimited`` at once for a request this process knows it would
        refuse (a rate just refused and not recovered, a big body while the key's
        allowed ones are in flight, or every thread share of this process
        taken): no lookup, no round trip.

        ``identity`` may come from a key nobody has checked yet: only an
        admitted key is ever remembered here, so a bad key is never refused."""
        if heavy and self.max_heavy and self._heavy_here.get(identity, 0) >= self.max_heavy:
            raise self._heavy_busy()
        if self.share is not None and self.share.full(identity):
            raise self._process_busy()
        if self.pacer is not None and (wait := self.pacer.wait(identity)) > 0:
            raise self.pacer.refusal(wait)
        if not self._refused:
            return
        now = time.monotonic()
        scopes = ("rate", "body_rate") if megabytes else ("rate",)
        for scope in scopes + (("heavy",) if heavy else ()):
            known = self._refused.get((identity, scope))
            if known is not None and known[0] > now:
                if scope == "heavy":
                    raise self._heavy_busy()
                retry = max(1, math.ceil(known[1] - now))
                raise RateLimited(
                    f"Too many requests for this agent key ({known[2]['limit']}); "
                    f"retry in {retry} s",
                    retry_after=retry,
                    details={**known[2], "scope": scope},
                )

    def _pace(self, identity: str) -> None:
        if self.pacer is not None and (wait := self.pacer.take(identity)) > 0:
            raise self.pacer.refusal(wait)

    def _refuse(self, identity: str, scope: str, message: str, retry: int, limit: str) -> None:
        self._remember(identity, scope, retry, limit)
        raise RateLimited(message, retry_after=retry, details={"limit": limit, "scope": scope})

    def _remember(self, identity: str, scope: str, retry: float, limit: str) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._refused) > 10_000:
                self._refused = {k: v for k, v in self._refused.items() if v[0] > now}
            self._refused[(identity, scope)] = (
                now + min(retry, REFUSAL_MEMORY_SECONDS),
                now + retry,
                {"limit": limit},
            )

    def _hit(self, item: limits.RateLimitItem, identity: str) -> bool:
        """One request against ``item``: from this process's batch of tokens, else
        a new batch from the shared window, else (near the limit) one token."""
        if self._batched:
            key, now = (str(item), identity), time.monotonic()
            with self._lock:
                left, until = self._tokens.get(key, (0, 0.0))
                if left > 0 and until > now:
                    self._tokens[key] = (left - 1, until)
                    return True
            size = min(MAX_TOKEN_BATCH, item.amount // 100)
            if size > 1 and self.strategy.hit(item, identity, cost=size):
                lifetime = item.get_expiry() * TOKEN_LIFETIME_SHARE
                with self._lock:
                    if len(self._tokens) > 10_000:  # keys come and go: drop the spent
                        self._tokens = {k: v for k, v in self._tokens.items() if v[1] > now}
                    self._tokens[key] = (size - 1, now + lifetime)
                return True
        return self.strategy.hit(item, identity)

    def _count(self, identity: str, megabytes: int) -> None:
        for item in self.rates:
            if not self._hit(item, identity):
                retry = self._retry_after(item, identity)
                self._refuse(
                    identity,
                    "rate",
                    f"Too many requests for this agent key (limit {item}); retry in {retry} s",
                    retry,
                    str(item),
                )
        # Big bodies cost CPU by the megabyte (parsing, counting tokens): a key
        # posting 30 MB appends in a loop passes every request rate yet would
        # keep cores busy. One body never costs more than a whole period's
        # budget, so any body the size limits allow can pass on a fresh budget.
        for item in self.body_rates if megabytes else ():
            if not self.strategy.hit(item, identity, "mb", cost=min(megabytes, item.amount)):
                retry = self._retry_after(item, identity, "mb")
                limit = f"{item.amount} MB of request bodies per {item.multiples} {item.GRANULARITY.name}"
                self._refuse(
                    identity,
                    "body_rate",
                    f"Too much data from this agent key (limit {limit}); retry in {retry} s",
                    retry,
                    limit,
                )

    def _lease(self, identity: str, token: str, heavy_token: str) -> None:
        if token and not self._acquire(self._slots_key(identity), self.max_concurrent, token):
            raise too_many_at_once(
                f"{self.max_concurrent} concurrent requests",
                f"this agent key already has {self.max_concurrent} requests in progress",
            )
        heavy_key = self._slots_key(identity, "heavy")
        if heavy_token and not self._acquire(heavy_key, self.max_heavy, heavy_token):
            self._give_back(self._slots_key(identity), token)
            # Held in another process: its next big bodies here are refused
            # before they are read, for a moment (nobody knows when it ends).
            self._remember(identity, "heavy", HEAVY_REFUSAL_MEMORY_SECONDS, "heavy")
            raise self._heavy_busy()

    def _process_busy(self) -> RateLimited:
        return too_many_at_once(
            f"{self.process_cap} concurrent requests on one server worker",
            "this agent key would take every thread of this server worker",
        )

    def _heavy_busy(self) -> RateLimited:
        return too_many_at_once(
            f"{self.max_heavy} concurrent requests with a large body",
            f"this agent key already has {self.max_heavy} large request(s) in progress",
        )

    def release(self, slot: Slot) -> None:
        self._leave_process(slot.identity)
        if slot.heavy_token:
            with self._lock:
                held = self._heavy_here.get(slot.identity, 0) - 1
                if held > 0:
                    self._heavy_here[slot.identity] = held
                else:
                    self._heavy_here.pop(slot.identity, None)
        try:
            self._give_back(self._slots_key(slot.identity), slot.token)
            self._give_back(self._slots_key(slot.identity, "heavy"), slot.heavy_token)
        except Exception:  # the lease lapses on its own
            self._storage_failed("release")

    def _give_back(self, name: str, token: str) -> None:
        if not token:
            return
        if self._acquire_script is not None:
            self.storage.storage.zrem(name, token)
        else:
            with self._lock:
                self._local.get(name, {}).pop(token, None)

    def in_flight(self, identity: str, kind: str = "") -> int:
        """Requests of ``identity`` holding a lease now (``kind="heavy"``: big ones)."""
        name = self._slots_key(identity, kind)
        if self._acquire_script is not None:
            return int(self.storage.storage.zcard(name))
        with self._lock:
            return len(self._live(name))

    def _retry_after(self, item: limits.RateLimitItem, *identifiers: str) -> int:
        reset = self.strategy.get_window_stats(item, *identifiers).reset_time
        return max(1, math.ceil(reset - time.time()))

    def _enter_process(self, identity: str) -> bool:
        return self.share is None or self.share.enter(identity)

    def _leave_process(self, identity: str) -> None:
        if self.share is not None:
            self.share.leave(identity)

    def _acquire(self, name: str, limit: int, token: str) -> bool:
        if self._acquire_script is not None:
            args = [limit, self.lease_seconds, token]
            return bool(self._acquire_script(keys=[name], args=args))
        with self._lock:
            live = self._live(name)
            if len(live) >= limit:
                return False
            live[token] = time.monotonic() + self.lease_seconds
            return True

    def _live(self, name: str) -> dict[str, float]:
        now = time.monotonic()
        live = {t: exp for t, exp in self._local.get(name, {}).items() if exp > now}
        self._local[name] = live
        return live

    def _slots_key(self, identity: str, kind: str = "") -> str:
        suffix = f":{kind}" if kind else ""
        prefix = getattr(self.storage, "key_prefix", "")  # Redis's; memory needs none
        return f"{prefix}:contextsvc:inflight:{identity}{suffix}"

    def _storage_failed(self, what: str) -> None:
        self._down_until = time.monotonic() + STORAGE_RETRY_SECONDS
        logger.warning(
            "rate limiter storage failed in %s; limits off for %.0f s",
            what,
            STORAGE_RETRY_SECONDS,
            exc_info=True,
        )
