"""Per-agent-key rate and concurrency limits: 429 + Retry-After in the error body,
counted per key after auth, shared through Redis, failing open without it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from contextsvc.ratelimit import KeyLimiter, RateLimited, get_limiter

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("REDIS_URL")


def storages() -> list:
    return [
        "memory://",
        pytest.param(REDIS_URL, marks=pytest.mark.needs_redis, id="redis"),
    ]


def one_user_message(client, sid: str):
    return client.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]}
    )


# --- over the API ------------------------------------------------------------------


def test_a_key_over_its_rate_gets_429_with_retry_after_and_the_error_body(
    alice, bob, make_session, settings
):
    settings.CONTEXTSVC_RATE_LIMIT = "3/minute"
    sid = make_session()["id"]  # 1
    assert one_user_message(alice, sid).status_code == 200  # 2
    assert alice.get(f"sessions/{sid}/budget").status_code == 200  # 3
    response = one_user_message(alice, sid)
    assert response.status_code == 429
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 60
    error = response.json()["error"]
    assert error["code"] == "RATE_LIMITED"
    assert f"retry in {retry_after} s" in error["message"]
    assert error["details"] == {
        "limit": "3 per 1 minute",
        "scope": "rate",
        "retry_after": retry_after,
    }
    # Nothing was appended by the refused call; another key is not affected.
    assert alice.get(f"sessions/{sid}/snapshot").status_code == 429
    bob_sid = make_session(bob)["id"]
    assert one_user_message(bob, bob_sid).status_code == 200


def test_a_refused_append_changes_nothing(alice, make_session, settings):
    sid = make_session()["id"]
    settings.CONTEXTSVC_RATE_LIMIT = "1/minute"
    assert one_user_message(alice, sid).status_code == 200
    assert one_user_message(alice, sid).status_code == 429
    settings.CONTEXTSVC_RATE_LIMIT = "off"
    messages = alice.get(f"sessions/{sid}/snapshot").json()["messages"]
    assert [m["content"] for m in messages] == ["hi"]


def test_bad_keys_are_401_not_counted_against_anyone(anon, alice, make_session, settings):
    settings.CONTEXTSVC_RATE_LIMIT = "2/minute"
    sid = make_session()["id"]  # alice: 1
    anon.raw_key = "csk_not-a-key"
    for _ in range(5):
        assert anon.get(f"sessions/{sid}").status_code == 401
    assert alice.get(f"sessions/{sid}").status_code == 200  # alice: 2


def test_the_concurrency_slot_is_given_back_after_each_response(alice, make_session, settings):
    # With one slot per key, every sequential call succeeds only if the previous
    # one released its slot — including calls that ended in an error.
    settings.CONTEXTSVC_RATE_LIMIT = "off"
    settings.CONTEXTSVC_MAX_CONCURRENT_PER_KEY = 1
    sid = make_session()["id"]
    for _ in range(3):
        assert one_user_message(alice, sid).status_code == 200
        assert alice.get("sessions/nope/budget").status_code == 404
        assert alice.post(f"sessions/{sid}/messages", {"messages": []}).status_code == 422
    limiter = get_limiter()
    assert limiter is not None and limiter.max_concurrent == 1
    assert limiter.in_flight(alice_identity(alice)) == 0


def alice_identity(client) -> str:
    from sessions.models import hash_key

    return hash_key(client.raw_key)[:16]


def test_limits_off_means_no_limiter(settings):
    settings.CONTEXTSVC_RATE_LIMIT = "off"
    settings.CONTEXTSVC_RATE_LIMIT_MB = "off"
    settings.CONTEXTSVC_RATE_PACE = "off"
    settings.CONTEXTSVC_MAX_CONCURRENT_PER_KEY = 0
    settings.CONTEXTSVC_MAX_HEAVY_PER_KEY = 0
    settings.CONTEXTSVC_KEEP_THREAD_FREE = False
    assert get_limiter() is None


# --- the limiter itself ------------------------------------------------------------


@pytest.mark.parametrize("storage", storages())
def test_concurrency_slots_are_counted_and_given_back(storage):
    limiter = KeyLimiter(storage, "off", max_concurrent=2, lease_seconds=60)
    key = uuid.uuid4().hex
    first, second = limiter.admit(key), limiter.admit(key)
    assert first and second and limiter.in_flight(key) == 2
    with pytest.raises(RateLimited) as refused:
        limiter.admit(key)
    assert refused.value.status == 429 and refused.value.retry_after == 1
    assert refused.value.details == {
        "limit": "2 concurrent requests",
        "scope": "concurrency",
        "retry_after": 1,
    }
    assert limiter.admit(uuid.uuid4().hex) is not None  # another key has its own slots
    first.release()
    assert limiter.in_flight(key) == 1
    assert limiter.admit(key) is not None


@pytest.mark.parametrize("storage", storages())
def test_a_slot_of_a_request_that_never_ended_lapses_with_its_lease(storage):
    # A worker killed mid-request never releases: the lease frees the slot.
    limiter = KeyLimiter(storage, "off", max_concurrent=1, lease_seconds=0.3)
    key = uuid.uuid4().hex
    assert limiter.admit(key) is not None
    with pytest.raises(RateLimited):
        limiter.admit(key)
    time.sleep(0.5)
    assert limiter.admit(key) is not None


@pytest.mark.parametrize("storage", storages())
def test_rates_refuse_past_the_limit_with_a_retry_after_within_the_window(storage):
    limiter = KeyLimiter(storage, "2/second;100/minute", max_concurrent=0, lease_seconds=60)
    key = uuid.uuid4().hex
    limiter.admit(key)
    limiter.admit(key)
    with pytest.raises(RateLimited) as refused:
        limiter.admit(key)
    assert refused.value.retry_after == 1
    assert refused.value.details["limit"] == "2 per 1 second"
    time.sleep(2.1)  # the sliding window has moved on
    assert limiter.admit(key) is None


@pytest.mark.needs_redis
def test_two_workers_share_one_count_through_redis():
    # Two limiters stand for two gunicorn worker processes.
    one = KeyLimiter(REDIS_URL, "3/minute", max_concurrent=1, lease_seconds=60)
    two = KeyLimiter(REDIS_URL, "3/minute", max_concurrent=1, lease_seconds=60)
    key = uuid.uuid4().hex
    slot = one.admit(key)
    with pytest.raises(RateLimited) as busy:
        two.admit(key)
    assert busy.value.details["scope"] == "concurrency"
    slot.release()
    two.admit(key).release()
    with pytest.raises(RateLimited) as rate:
        one.admit(key)
    assert rate.value.details["scope"] == "rate"


def test_an_unreachable_storage_lets_requests_through_fast():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    limiter = KeyLimiter(f"redis://127.0.0.1:{port}/0", "1/minute", 1, 60)
    start = time.perf_counter()
    slots = [limiter.admit("k") for _ in range(20)]  # past both limits: not refused
    assert time.perf_counter() - start < 5
    assert all(slot is not None and not slot.token for slot in slots)
    for slot in slots:
        slot.release()


def test_a_key_never_takes_every_thread_of_one_worker_another_key_is_on():
    # An agent's keep-alive connection stays on one gunicorn worker: a key that
    # took all its threads would stall every other key connected there.
    limiter = KeyLimiter("memory://", "off", max_concurrent=10, lease_seconds=60, web_threads=3)
    key = uuid.uuid4().hex
    limiter.admit(uuid.uuid4().hex).release()  # another key, its connection still open
    held = [limiter.admit(key), limiter.admit(key)]
    with pytest.raises(RateLimited) as refused:
        limiter.admit(key)
    assert refused.value.details == {
        "limit": "2 concurrent requests on one server worker",
        "scope": "concurrency",
        "retry_after": 1,
    }
    assert limiter.admit(uuid.uuid4().hex) is not None  # the free thread serves others
    held.pop().release()
    assert limiter.admit(key) is not None


def test_the_worker_share_holds_while_the_shared_storage_is_down():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    limiter = KeyLimiter(f"redis://127.0.0.1:{port}/0", "off", 4, 60, web_threads=2)
    limiter.admit("other").release()
    first = limiter.admit("k")
    with pytest.raises(RateLimited):
        limiter.admit("k")
    first.release()
    assert limiter.admit("k") is not None


def test_a_malformed_rate_setting_stops_the_start():
    env = {**os.environ, "CONTEXTSVC_RATE_LIMIT": "fifty a second"}
    result = subprocess.run(
        [sys.executable, "-c", "import contextsvc.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "CONTEXTSVC_RATE_LIMIT" in result.stderr and "ImproperlyConfigured" in result.stderr


@pytest.mark.parametrize("storage", storages())
def test_request_bodies_are_limited_by_the_megabyte(storage):
    limiter = KeyLimiter(storage, "off", 0, 60, body_rates="10/minute")
    key = uuid.uuid4().hex
    limiter.admit(key, 6)
    limiter.admit(key, 0)  # small requests cost nothing here
    with pytest.raises(RateLimited) as refused:
        limiter.admit(key, 6)
    assert refused.value.details["scope"] == "body_rate"
    assert refused.value.details["limit"] == "10 MB of request bodies per 1 minute"
    assert 1 <= refused.value.retry_after <= 60
    # A body bigger than a whole period's budget still passes on a fresh one.
    other = uuid.uuid4().hex
    limiter.admit(other, 50)
    with pytest.raises(RateLimited):
        limiter.admit(other, 1)


def test_a_key_posting_too_many_megabytes_gets_429(alice, make_session, settings):
    settings.CONTEXTSVC_RATE_LIMIT_MB = "2/minute"
    sid = make_session()["id"]
    big = "word " * 500_000  # 2.5 MB: counts as 2 (whole megabytes)
    assert (
        alice.post(
            f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": big}]}
        ).status_code
        == 200
    )
    response = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": big}]}
    )
    assert response.status_code == 429 and int(response["Retry-After"]) >= 1
    assert response.json()["error"]["details"]["scope"] == "body_rate"
    assert one_user_message(alice, sid).status_code == 200  # small calls go on


@pytest.mark.needs_redis
def test_rate_tokens_come_in_batches_and_the_limit_still_holds_across_workers():
    # 300/minute: each process takes 3 tokens a round trip (1 % of the limit).
    one = KeyLimiter(REDIS_URL, "300/minute", max_concurrent=0, lease_seconds=60)
    two = KeyLimiter(REDIS_URL, "300/minute", max_concurrent=0, lease_seconds=60)
    key = uuid.uuid4().hex
    item = one.rates[0]
    one.admit(key)
    # One request took a batch of three from the shared window.
    assert item.amount - one.strategy.get_window_stats(item, key).remaining == 3
    one.admit(key), one.admit(key)  # spent locally: nothing more counted
    assert item.amount - one.strategy.get_window_stats(item, key).remaining == 3
    admitted = 3
    with pytest.raises(RateLimited) as refused:
        for n in range(1000):
            (one if n % 2 else two).admit(key)
            admitted += 1
    assert refused.value.details["scope"] == "rate"
    # Never more than the limit; refused at most a batch early per process.
    assert 300 - 2 * 2 <= admitted <= 300


@pytest.mark.parametrize("storage", storages())
def test_a_key_has_one_large_request_in_flight_at_a_time(storage):
    limiter = KeyLimiter(storage, "off", max_concurrent=0, lease_seconds=60, max_heavy=1)
    key = uuid.uuid4().hex
    big = limiter.admit(key, 30, heavy=True)
    assert limiter.in_flight(key, "heavy") == 1
    with pytest.raises(RateLimited) as refused:
        limiter.admit(key, 30, heavy=True)
    assert refused.value.details == {
        "limit": "1 concurrent requests with a large body",
        "scope": "concurrency",
        "retry_after": 1,
    }
    small = limiter.admit(key)  # the key's ordinary calls go on meanwhile
    other = limiter.admit(uuid.uuid4().hex, 30, heavy=True)  # and other keys' uploads
    big.release()
    assert limiter.in_flight(key, "heavy") == 0
    limiter.admit(key, 30, heavy=True).release()
    for slot in (small, other):
        slot.release()


@pytest.mark.needs_redis
def test_a_refused_large_request_gives_back_its_global_slot():
    limiter = KeyLimiter(REDIS_URL, "off", max_concurrent=3, lease_seconds=60, max_heavy=1)
    key = uuid.uuid4().hex
    held = limiter.admit(key, 5, heavy=True)
    with pytest.raises(RateLimited):
        limiter.admit(key, 5, heavy=True)
    assert limiter.in_flight(key) == 1  # only the admitted one holds a global slot
    held.release()
    assert limiter.in_flight(key) == 0 and limiter.in_flight(key, "heavy") == 0


@pytest.mark.parametrize("storage", storages())
def test_a_key_just_refused_is_refused_again_before_any_lookup(storage):
    limiter = KeyLimiter(storage, "2/minute", max_concurrent=0, lease_seconds=60)
    key = uuid.uuid4().hex
    limiter.refuse_known(key)  # nothing known yet: no refusal
    limiter.admit(key), limiter.admit(key)
    with pytest.raises(RateLimited) as first:
        limiter.admit(key)
    with pytest.raises(RateLimited) as again:
        limiter.refuse_known(key)  # what auth calls before looking the key up
    assert again.value.details == first.value.details
    assert 1 <= again.value.retry_after <= first.value.retry_after
    limiter.refuse_known(uuid.uuid4().hex)  # other keys are not affected


def test_a_flooding_key_is_refused_before_its_key_is_looked_up(
    alice, make_session, settings, django_assert_num_queries
):
    sid = make_session()["id"]
    settings.CONTEXTSVC_RATE_LIMIT = "2/minute"
    for _ in range(2):
        assert alice.get(f"sessions/{sid}/budget").status_code == 200
    assert alice.get(f"sessions/{sid}/budget").status_code == 429
    with django_assert_num_queries(0):
        refused = alice.get(f"sessions/{sid}/budget")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "RATE_LIMITED"
    assert int(refused["Retry-After"]) == refused.json()["error"]["details"]["retry_after"]


@pytest.mark.parametrize("storage", storages())
def test_a_big_body_while_this_process_serves_the_key_s_big_one_is_refused_early(storage):
    limiter = KeyLimiter(storage, "off", max_concurrent=0, lease_seconds=60, max_heavy=1)
    key = uuid.uuid4().hex
    limiter.refuse_known(key, 30, heavy=True)  # none in flight: no refusal
    held = limiter.admit(key, 30, heavy=True)
    with pytest.raises(RateLimited) as refused:
        limiter.refuse_known(key, 30, heavy=True)
    assert refused.value.details["limit"] == "1 concurrent requests with a large body"
    limiter.refuse_known(key)  # its small calls are not refused
    held.release()
    limiter.refuse_known(key, 30, heavy=True)
