"""Heartbeat leases for compaction runs: renewed while a run works, judged when it stops.

A run that an executor holds (``running``) carries a short lease that a
heartbeat thread renews while the run works — through a summariser call too —
so a run whose executor was killed (OOM, node loss, ``kill -9``) is recognised
within one lease instead of after the task time limit. Whoever next looks at
such a run (a request, a worker's sweep, beat) requeues it, or fails it once it
has been claimed ``CONTEXTSVC_COMPACTION_MAX_ATTEMPTS`` times (the session is
never touched: results are applied in one transaction at the end).

This module decides and renews; the writes that requeue or fail a run live in
``services.requests`` (``compaction_recover``), which imports this module, not the
other way round.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections
from django.utils import timezone

from .models import CompactionRun

logger = logging.getLogger("contextsvc.compaction")

Status = CompactionRun.Status

# A queued run nobody claimed for this long is enqueued again (lost message,
# broker down at enqueue time): its lease until a claim gives it a short one.
STALE_QUEUED = timedelta(seconds=120)


def lease_seconds() -> int:
    """How long a claim or a heartbeat keeps a run its holder's."""
    return int(settings.CONTEXTSVC_COMPACTION_LEASE_SECONDS)


def heartbeat_interval() -> float:
    # Three beats per lease: one slow or lost renewal does not make a live run
    # look dead.
    return lease_seconds() / 3


def max_attempts() -> int:
    """Claims after which a run left running by a lost executor is failed."""
    return int(settings.CONTEXTSVC_COMPACTION_MAX_ATTEMPTS)


def context_wait_seconds() -> float:
    """The most ``GET /context`` waits on a run another executor holds."""
    return float(settings.CONTEXTSVC_CONTEXT_WAIT_SECONDS)


def lease_deadline(now: datetime | None = None) -> datetime:
    """When a lease taken or renewed now runs out."""
    return (now or timezone.now()) + timedelta(seconds=lease_seconds())


def lapsed(run: CompactionRun, now: datetime | None = None) -> bool:
    """Queued or running with a lease in the past: nobody is working on it."""
    return (
        run.status in CompactionRun.ACTIVE
        and run.lease_expires_at is not None
        and run.lease_expires_at <= (now or timezone.now())
    )


def stalled(run: CompactionRun, now: datetime | None = None) -> bool:
    """Running, and its holder missed its last heartbeats (its lease is not yet out).

    A healthy holder keeps at least two thirds of a lease ahead (a beat every
    third); a quarter left means two beats were missed: the run is not making
    progress, so nobody should wait for it, though it is not taken over yet.
    """
    if run.status != Status.RUNNING or run.lease_expires_at is None:
        return False
    left = (run.lease_expires_at - (now or timezone.now())).total_seconds()
    return left < lease_seconds() / 4


def exhausted(run: CompactionRun) -> bool:
    """A run left running by a lost executor this many times is failed, not requeued
    (a run that kills its worker every time must not loop forever)."""
    return run.status == Status.RUNNING and run.attempts >= max_attempts()


class Heartbeat:
    """Renew a claimed run's lease from a thread until the ``with`` block ends.

    Only the latest attempt renews (the UPDATE matches ``attempts``), so a holder
    that was superseded stops at once. The beat gives up after the task time
    limit: a run that long has a stuck holder, which must not keep the run
    forever. The thread uses (and closes) its own database connection.
    """

    def __init__(self, run_id: Any, attempt: int) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"compaction-heartbeat-{run_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=lease_seconds())

    def renew(self) -> bool:
        """One beat: False when the run is no longer this attempt's."""
        updated = CompactionRun.objects.filter(
            pk=self.run_id, attempts=self.attempt, status=Status.RUNNING
        ).update(lease_expires_at=lease_deadline())
        self.beats += 1
        return bool(updated)

    def _loop(self) -> None:
        give_up = float(getattr(settings, "CELERY_TASK_TIME_LIMIT", 600))
        interval = heartbeat_interval()
        elapsed = 0.0
        try:
            while not self._stop.wait(interval):
                elapsed += interval
                if elapsed > give_up:
                    logger.warning(
                        "compaction run %s: heartbeat stopped after %ss", self.run_id, give_up
                    )
                    return
                try:
                    if not self.renew():
                        return
                except DatabaseError:
                    # The next beat tries again; a lease that runs out meanwhile
                    # only means another executor may take the run over.
                    logger.warning(
                        "compaction run %s: heartbeat failed", self.run_id, exc_info=True
                    )
        finally:
            connections.close_all()


class Sweeper:
    """A worker's own chore: every ``interval`` seconds, requeue or fail lapsed runs.

    So a run whose worker was killed is recovered by the next live worker
    without beat. The connection is closed after each sweep, so a prefork
    child forked meanwhile never inherits an open one.
    """

    def __init__(self, sweep: Callable[[], int], interval: float) -> None:
        self.sweep = sweep
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compaction-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)

    def _loop(self) -> None:
        while True:
            try:
                recovered = self.sweep()
                if recovered:
                    logger.info("recovered %s compaction run(s) whose lease lapsed", recovered)
            except Exception:  # noqa: BLE001 - the chore must outlive a database outage
                logger.warning("compaction lease sweep failed", exc_info=True)
            finally:
                connections.close_all()
            if self._stop.wait(self.interval):
                return
