"""A key's share of one server worker's threads, in process memory (free).

An agent's keep-alive connection stays with the worker that accepted it, so a
key holding every thread of one worker would stall every other key connected
there. A key therefore holds at most ``threads - 1`` of them — but only while
another key is there to need the free one: one with a request in flight here,
or one served here within ``recent_seconds`` (gunicorn's keep-alive: its
connection may still be open, its next call on the way). Only admitted keys
count, so a bad key cannot make the others' share shrink. A key alone on the
worker (a single-tenant deployment: one team, one key, many agents) may use
every thread; when another key turns up, its request waits for the first
thread to come free, and from then on one stays free for it.
"""

from __future__ import annotations

import threading
import time

# Keys not seen for longer than this hold no state.
_PRUNE_AT = 10_000


class ThreadShare:
    """At most ``cap`` requests in flight per identity in this process while
    another identity is in flight or was served within ``recent_seconds``."""

    def __init__(self, cap: int, recent_seconds: float) -> None:
        self.cap = cap
        self.recent_seconds = recent_seconds
        self._held: dict[str, int] = {}  # identity -> requests in flight here
        self._seen: dict[str, float] = {}  # identity -> last admitted or finished
        self._lock = threading.Lock()

    def enter(self, identity: str) -> bool:
        """Take a thread for ``identity``'s request; False when it must wait its turn."""
        now = time.monotonic()
        with self._lock:
            held = self._held.get(identity, 0)
            if held >= self.cap and self._others_here(identity, now):
                return False
            self._held[identity] = held + 1
            self._seen_at(identity, now)
            return True

    def leave(self, identity: str) -> None:
        """Give the thread back: called before the response goes out, so that a
        client's next request (on this connection or a new one) never finds its
        finished one still counted."""
        now = time.monotonic()
        with self._lock:
            held = self._held.get(identity, 0) - 1
            if held > 0:
                self._held[identity] = held
            else:
                self._held.pop(identity, None)
            self._seen_at(identity, now)

    def full(self, identity: str) -> bool:
        """Whether ``identity``'s next request would be refused now (no change)."""
        if self._held.get(identity, 0) < self.cap:
            return False
        with self._lock:
            return self._held.get(identity, 0) >= self.cap and self._others_here(
                identity, time.monotonic()
            )

    def _others_here(self, identity: str, now: float) -> bool:
        # Only reached for a key already at its cap: a short walk, rarely.
        if any(other != identity for other in self._held):
            return True
        since = now - self.recent_seconds
        return any(other != identity and seen > since for other, seen in self._seen.items())

    def _seen_at(self, identity: str, now: float) -> None:
        if len(self._seen) >= _PRUNE_AT and identity not in self._seen:
            since = now - self.recent_seconds
            self._seen = {k: v for k, v in self._seen.items() if v > since or k in self._held}
        self._seen[identity] = now
