"""Tests marked ``alone`` run while no other test runs.

The contract fuzz holds every response to 2 s. On a two-core machine that bound
measures the service only when the other xdist worker is not running Chromium
or an agent CLI at the same moment, so the other workers wait for it.

One file lock per test run, shared by every xdist worker: each test holds it
shared while it runs, an ``alone`` test holds it exclusive. A turnstile in
front keeps the exclusive taker from waiting forever behind a stream of shared
ones (``flock`` itself has no queue).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _lock_paths() -> tuple[Path, Path] | None:
    """The run's two lock files, or None outside xdist (nothing runs beside a test)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return None
    base = Path(tempfile.gettempdir()) / f"contextsvc-tests-{run}"
    return base.with_suffix(".turnstile"), base.with_suffix(".room")


@contextmanager
def held(exclusive: bool) -> Iterator[None]:
    """Hold the run's lock while the test runs: exclusive for an ``alone`` test."""
    paths = _lock_paths()
    if paths is None:
        yield
        return
    turnstile_path, room_path = paths
    with open(turnstile_path, "a") as turnstile, open(room_path, "a") as room:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
