"""Pacing: a key's requests past a burst are spread evenly, in process memory.

A per-minute window lets a flooding key spend its whole minute at once: the
shipped 1,500 a minute went by in 7 s, 130-240 small appends a second taking
a thread of every worker and half the CPU, and the other keys' p99 tripled
(tests/sessions/test_starvation.py). Pacing admits a key's requests past a
burst at a steady rate instead (the generic cell rate algorithm: a token
bucket kept as one timestamp per key), so a flood costs the server the same
small share every second and the other keys barely notice it, while an agent
that sends a few calls at once never waits.

Per process, not shared: it is free (no round trip) and a flood spreads over
the workers anyway; the shared windows (``limiter.py``) bound the total. Not
from the ``limits`` library: it has no token bucket, and its windows admit
their whole amount at once.
"""

from __future__ import annotations

import math
import threading
import time

import limits

from .rates import RateLimited

# Keys not seen for a while hold no state: a full bucket is the same as none.
_PRUNE_AT = 10_000


class Pacer:
    """At most ``burst`` requests of one identity at once, then one every
    ``1 / rate`` seconds (``rate``: a ``limits`` item such as 25/second)."""

    def __init__(self, rate: limits.RateLimitItem, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.interval = rate.get_expiry() / rate.amount
        # How far ahead of now a key's next turn may be and still be let in.
        self.tolerance = max(0, burst - 1) * self.interval
        self._due: dict[str, float] = {}  # identity -> its theoretical next arrival
        self._lock = threading.Lock()

    def take(self, identity: str) -> float:
        """Admit one request now (0.0), or the seconds until one would be."""
        now = time.monotonic()
        with self._lock:
            due = max(self._due.get(identity, now), now)
            wait = due - self.tolerance - now
            if wait > 0:
                return wait
            if len(self._due) >= _PRUNE_AT:
                self._due = {k: v for k, v in self._due.items() if v > now}
            self._due[identity] = due + self.interval
            return 0.0

    def wait(self, identity: str) -> float:
        """The seconds until ``identity``'s next request would be admitted (0.0:
        now), taking nothing: the check made before a request is read."""
        due = self._due.get(identity)
        if due is None:
            return 0.0
        return max(0.0, due - self.tolerance - time.monotonic())

    def refusal(self, wait: float) -> RateLimited:
        """The 429 of a request ``wait`` seconds before its turn."""
        limit = f"{self.rate} after a burst of {self.burst}"
        retry = max(1, math.ceil(wait))
        return RateLimited(
            f"Too many requests at once for this agent key (paced to {limit}); retry in {retry} s",
            retry_after=retry,
            details={"limit": limit, "scope": "rate"},
        )
