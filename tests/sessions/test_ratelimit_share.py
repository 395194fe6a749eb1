"""A key's share of one worker's threads (contextsvc/ratelimit/share.py): a
thread stays free for another key only while another key is there to need it,
and a finished request never counts against the next one."""

from __future__ import annotations

import time
import uuid

import pytest
from django.http import HttpRequest, HttpResponse

from contextsvc.ratelimit import KeyLimiter, RateLimited, RateLimitMiddleware
from contextsvc.ratelimit.share import ThreadShare


def limiter(threads: int, recent: float = 15.0) -> KeyLimiter:
    return KeyLimiter("memory://", "off", 0, 60, web_threads=threads, recent_seconds=recent)


def test_a_key_alone_on_the_worker_may_use_every_thread():
    # One team, one key, many agents: nobody else needs a free thread.
    worker, key = limiter(3), uuid.uuid4().hex
    held = [worker.admit(key) for _ in range(3)]
    worker.refuse_known(key)  # and the WSGI wrapper agrees
    for slot in held:
        slot.release()


def test_another_key_in_flight_keeps_a_thread_free():
    worker, key, other = limiter(3), uuid.uuid4().hex, uuid.uuid4().hex
    theirs = worker.admit(other)
    mine = [worker.admit(key), worker.admit(key)]
    with pytest.raises(RateLimited) as refused:
        worker.admit(key)
    assert refused.value.details["scope"] == "concurrency"
    with pytest.raises(RateLimited):
        worker.refuse_known(key)
    for slot in (theirs, *mine):
        slot.release()


def test_a_key_served_within_the_keep_alive_still_counts_then_not():
    worker, key = limiter(2, recent=0.3), uuid.uuid4().hex
    worker.admit(uuid.uuid4().hex).release()  # its connection may still be open
    first = worker.admit(key)
    with pytest.raises(RateLimited):
        worker.admit(key)
    time.sleep(0.35)  # past the keep-alive: that key's connection is gone
    second = worker.admit(key)
    first.release(), second.release()


def test_a_key_past_its_share_while_alone_waits_for_others_only_from_then_on():
    # Two in flight while alone; another key comes: nothing is taken back, but
    # the key gets no new thread until it is under its share again.
    share, key, other = ThreadShare(1, 15.0), uuid.uuid4().hex, uuid.uuid4().hex
    assert share.enter(key) and share.enter(key)
    assert share.enter(other)
    assert not share.enter(key) and share.full(key)
    share.leave(key)
    assert not share.enter(key)  # still one in flight: its share
    share.leave(key)
    assert share.enter(key)
    assert share.full(other)  # the same rule for the other key, now at its share


def test_a_bad_key_is_never_counted_as_another_key():
    # Only admitted keys are remembered: a refused (or unknown) one leaves
    # the key alone on the worker with every thread.
    worker, key = limiter(2), uuid.uuid4().hex
    worker.refuse_known(uuid.uuid4().hex)
    held = [worker.admit(key), worker.admit(key)]
    for slot in held:
        slot.release()


@pytest.mark.django_db  # closing a response sends request_finished, which checks the connection
def test_the_share_is_given_back_before_the_response_leaves_the_application():
    # The client's next request may reach another thread the moment the
    # response is sent: it must not find the finished request still counted.
    worker, key = limiter(2), uuid.uuid4().hex
    worker.admit(uuid.uuid4().hex).release()  # another key is there: a cap of 1

    def view(request: HttpRequest) -> HttpResponse:
        request.contextsvc_slot = worker.admit(key)
        return HttpResponse("ok")

    response = RateLimitMiddleware(view)(HttpRequest())
    assert not worker.share.full(key)  # before the server sent (and closed) it
    worker.admit(key).release()
    response.close()
    assert not worker.share.full(key)  # and closing gives back nothing twice


def test_a_request_that_raised_gives_its_share_back():
    worker, key = limiter(2), uuid.uuid4().hex
    worker.admit(uuid.uuid4().hex).release()

    def view(request: HttpRequest) -> HttpResponse:
        request.contextsvc_slot = worker.admit(key)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        RateLimitMiddleware(view)(HttpRequest())
    worker.admit(key).release()
