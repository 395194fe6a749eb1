"""Pacing (contextsvc/ratelimit/pacing.py): past a burst, a key's requests are
admitted at a steady rate, so a flood cannot spend a whole minute's window in
seconds; an agent's few calls at once never wait."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import limits
import pytest
from django.test.signals import setting_changed
from django.test.utils import override_settings

from contextsvc.ratelimit import KeyLimiter, RateLimited, get_limiter
from contextsvc.ratelimit.pacing import Pacer

ROOT = Path(__file__).resolve().parents[2]


def test_a_burst_passes_at_once_then_requests_are_spaced_by_the_rate():
    pacer = Pacer(limits.parse("20/second"), burst=5)
    key = uuid.uuid4().hex
    assert [pacer.take(key) for _ in range(5)] == [0.0] * 5
    wait = pacer.take(key)
    assert 0 < wait <= 0.05  # one every 50 ms
    assert pacer.wait(key) == pytest.approx(wait, abs=0.01)  # a peek takes nothing
    time.sleep(wait + 0.005)
    assert pacer.take(key) == 0.0 and pacer.take(key) > 0  # one turn, not a new burst
    assert pacer.take(uuid.uuid4().hex) == 0.0  # another key has its own bucket


def test_a_refused_request_does_not_push_the_next_turn_back():
    pacer = Pacer(limits.parse("10/second"), burst=1)
    key = uuid.uuid4().hex
    assert pacer.take(key) == 0.0
    for _ in range(50):  # a flood's retries
        assert pacer.take(key) > 0
    time.sleep(0.11)
    assert pacer.take(key) == 0.0


def test_an_idle_key_s_bucket_refills_to_the_burst_and_no_further():
    pacer = Pacer(limits.parse("100/second"), burst=3)
    key = uuid.uuid4().hex
    assert all(pacer.take(key) == 0.0 for _ in range(3))
    time.sleep(0.2)  # 20 turns' worth of time: still a burst of 3
    assert [pacer.take(key) == 0.0 for _ in range(4)] == [True, True, True, False]
    assert pacer.wait(uuid.uuid4().hex) == 0.0  # unknown keys are never refused


def test_a_paced_key_gets_429_with_retry_after_before_any_shared_count():
    limiter = KeyLimiter("memory://", "3/minute", 0, 60, pace="10/second", burst=2)
    key = uuid.uuid4().hex
    limiter.admit(key)
    limiter.admit(key)
    with pytest.raises(RateLimited) as refused:
        limiter.admit(key)
    assert refused.value.retry_after == 1
    assert refused.value.details == {
        "limit": "10 per 1 second after a burst of 2",
        "scope": "rate",
        "retry_after": 1,
    }
    # Refused before the window counted it: the minute still has one left.
    with pytest.raises(RateLimited):
        limiter.refuse_known(key)  # what the WSGI wrapper asks, before the body
    time.sleep(0.11)
    limiter.refuse_known(key)
    limiter.admit(key)
    time.sleep(0.11)
    with pytest.raises(RateLimited) as over:
        limiter.admit(key)  # now the minute's window refuses
    assert over.value.details["limit"] == "3 per 1 minute"


def test_the_proxy_s_counted_calls_are_paced_too():
    limiter = KeyLimiter("memory://", "off", 0, 60, pace="5/second", burst=1)
    key = uuid.uuid4().hex
    limiter.count(key)
    with pytest.raises(RateLimited):
        limiter.count(key)


def test_a_paced_refusal_gives_back_the_thread_share():
    limiter = KeyLimiter("memory://", "off", 0, 60, web_threads=2, pace="1/second", burst=1)
    key = uuid.uuid4().hex
    limiter.admit(key).release()
    with pytest.raises(RateLimited):
        limiter.admit(key)
    time.sleep(1.01)
    limiter.admit(key).release()  # the refusal held no share of the worker


@pytest.mark.parametrize(("pace", "burst"), [("off", 50), ("25/second", 0)])
def test_pacing_off(pace, burst):
    limiter = KeyLimiter("memory://", "off", 0, 60, pace=pace, burst=burst)
    key = uuid.uuid4().hex
    for _ in range(200):
        limiter.admit(key)
    assert limiter.pacer is None


def test_the_shipped_pace_and_an_agent_s_calls(settings):
    settings.CONTEXTSVC_RATE_PACE = "25/second"
    settings.CONTEXTSVC_RATE_BURST = 50
    limiter = get_limiter()
    key = uuid.uuid4().hex
    for _ in range(50):  # a batch of calls at once
        limiter.count(key)
    with pytest.raises(RateLimited):
        limiter.count(key)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("CONTEXTSVC_RATE_PACE", "quickly", "is not a rate"),
        ("CONTEXTSVC_RATE_PACE", "25/second;1000/minute", "must be one rate"),
        ("CONTEXTSVC_REFUSAL_HOLD_SECONDS", "61", "must be <= 60"),
        ("CONTEXTSVC_REFUSAL_HOLD_SECONDS", "-1", "must be >= 0"),
    ],
)
def test_a_bad_pacing_or_hold_setting_stops_the_start(name, value, says):
    result = subprocess.run(
        [sys.executable, "-c", "import contextsvc.settings"],
        cwd=ROOT,
        env={**os.environ, name: value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and f"{name}=" in result.stderr
    assert says in result.stderr


def test_the_limiter_in_use_is_always_the_one_of_the_settings_in_force(monkeypatch):
    # A limiter cached under other settings (a test's, or one built on another
    # thread while they held) must never outlive them: no signal to depend on.
    monkeypatch.setattr(setting_changed, "receivers", [])
    monkeypatch.setattr(setting_changed, "sender_receivers_cache", {})
    with override_settings(CONTEXTSVC_RATE_PACE="25/second", CONTEXTSVC_RATE_BURST=50):
        paced = get_limiter()
        assert paced is not None and paced.pacer is not None
        assert get_limiter() is paced  # built once for these settings
    after = get_limiter()
    assert after is not paced and (after is None or after.pacer is None)
