"""tests/alone.py: an ``alone`` test excludes every other test of the run, and
one waiting for its turn is not passed by tests that arrive after it."""

from __future__ import annotations

import threading
import uuid

import pytest

from tests import alone

WAIT = 0.3  # long enough for a thread that is free to enter to have entered


@pytest.fixture
def one_run(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", f"lock-test-{uuid.uuid4().hex}")
    yield
    for path in alone._lock_paths():
        path.unlink(missing_ok=True)


def _holder(exclusive: bool, entered: threading.Event, leave: threading.Event) -> threading.Thread:
    def hold() -> None:
        with alone.held(exclusive=exclusive):
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def test_shared_holders_run_together_and_an_exclusive_one_waits_for_them(one_run):
    first, second, solo = threading.Event(), threading.Event(), threading.Event()
    leave_shared, leave_solo = threading.Event(), threading.Event()
    a = _holder(False, first, leave_shared)
    b = _holder(False, second, leave_shared)
    assert first.wait(5) and second.wait(5)
    c = _holder(True, solo, leave_solo)
    assert not solo.wait(WAIT)
    leave_shared.set()
    a.join(5), b.join(5)
    assert solo.wait(5)
    leave_solo.set()
    c.join(5)


def test_a_waiting_exclusive_holder_is_not_passed_by_later_shared_ones(one_run):
    shared, solo, late = threading.Event(), threading.Event(), threading.Event()
    leave_shared, leave_solo, leave_late = threading.Event(), threading.Event(), threading.Event()
    a = _holder(False, shared, leave_shared)
    assert shared.wait(5)
    c = _holder(True, solo, leave_solo)
    assert not solo.wait(WAIT)
    d = _holder(False, late, leave_late)  # arrives while the exclusive one waits
    assert not late.wait(WAIT)
    leave_shared.set()
    a.join(5)
    assert solo.wait(5)
    assert not late.wait(WAIT)  # still out while the exclusive one runs
    leave_solo.set()
    c.join(5)
    assert late.wait(5)
    leave_late.set()
    d.join(5)


def test_outside_xdist_nothing_is_locked(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    assert alone._lock_paths() is None
    with alone.held(exclusive=True), alone.held(exclusive=True):
        pass  # a second exclusive holder in the same process would block on a real lock
