"""gunicorn's threaded worker, holding refused floods' connections
(``contextsvc/ratelimit/hold.py``); gunicorn.conf.py makes it the worker class.

No Django here: gunicorn's master imports this before any app is loaded.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

from contextsvc.ratelimit.hold import serving

# Connections held at once per worker, at most: a hold must never take the
# room of connections gunicorn would accept (worker_connections, 1,000 by
# default). Past it a refused connection goes on at once, as without holds.
MAX_HELD = 256


class HoldingThreadWorker(ThreadWorker):
    """``gthread``, plus: a connection whose response asked for a hold waits,
    off every thread and off the poller, until its hold ends; then it is kept
    alive or closed as gunicorn would have done at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: list[tuple[float, int, Any, Any]] = []  # (until, n, conn, future)
        self._order = itertools.count()

    def handle(self, conn: Any) -> Any:
        serving(conn)
        try:
            return super().handle(conn)
        finally:
            serving(None)

    def finish_request(self, conn: Any, fs: Any) -> None:
        until = conn.__dict__.pop("contextsvc_hold_until", 0.0)
        if until > time.monotonic() and self.alive and len(self._held) < MAX_HELD:
            heapq.heappush(self._held, (until, next(self._order), conn, fs))
            return
        super().finish_request(conn, fs)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        if self._held:
            timeout = min(timeout, max(0.0, self._held[0][0] - time.monotonic()))
        super().wait_for_and_dispatch_events(timeout)
        self._release(everything=not self.alive)

    def _release(self, *, everything: bool = False) -> None:
        now = time.monotonic()
        while self._held and (everything or self._held[0][0] <= now):
            _, _, conn, fs = heapq.heappop(self._held)
            super().finish_request(conn, fs)
