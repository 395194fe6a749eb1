"""The client's retry rule and error mapping, on scripted transports (no server needed)."""

from __future__ import annotations

import asyncio
import email.utils
import time

import httpx
import pytest
from contextsvc_client import (
    AsyncClient,
    Client,
    ConnectionFailedError,
    ContextsvcError,
    RateLimitedError,
    RetryPolicy,
    ServiceUnavailableError,
)
from contextsvc_client._core import retry_after_seconds

FAST = RetryPolicy(max_retries=2, backoff=0.001, max_backoff=0.002)


def _error(status: int, code: str, **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": "not now", "details": {"retry_after": 1}}}
    return httpx.Response(status, json=body, headers=headers)


def test_retry_after_is_read_as_seconds_or_an_http_date():
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("0") == 0.0
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after_seconds(soon) <= 31
    assert retry_after_seconds("not a date") is None and retry_after_seconds(None) is None


def test_the_wait_honours_retry_after_up_to_its_cap_else_backs_off():
    policy = RetryPolicy(backoff=0.5, max_backoff=4, max_retry_after=10)
    later = httpx.Response(429, headers={"Retry-After": "7"})
    too_late = httpx.Response(503, headers={"Retry-After": "3600"})
    assert policy.delay(0, later) == 7 and policy.delay(0, too_late) == 10
    assert all(0 <= policy.delay(5) <= 4 for _ in range(100))
    assert all(0 <= policy.delay(0) <= 0.5 for _ in range(100))


def test_after_the_last_retry_the_typed_error_is_raised():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _error(429, "RATE_LIMITED", **{"Retry-After": "0"})

    with Client("http://svc", "cx_k", retry=FAST, transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(RateLimitedError) as limited:
            c.session("s").budget()
    assert len(seen) == 3 and limited.value.details == {"retry_after": 1}


def test_a_body_that_is_not_the_services_shape_still_maps_by_status():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/budget"):
            return httpx.Response(502, text="<html>bad gateway</html>")
        return httpx.Response(503, text="down")

    with Client(
        "http://svc",
        "cx_k",
        retry=RetryPolicy(max_retries=0),
        transport=httpx.MockTransport(handler),
    ) as c:
        with pytest.raises(ContextsvcError) as gateway:
            c.session("s").budget()
        with pytest.raises(ServiceUnavailableError):
            c.session("s").context()
    assert gateway.value.code == "HTTP_502" and gateway.value.status == 502


def test_a_usage_report_is_not_repeated_once_it_may_have_arrived():
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        raise httpx.ReadTimeout("no answer", request=request)

    with Client("http://svc", "cx_k", retry=FAST, transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(ConnectionFailedError):
            c.session("s").usage(10, 2)  # would count twice if repeated
        with pytest.raises(ConnectionFailedError):
            c.session("s").budget()  # a read is repeated
    assert [r.method for r in sent] == ["POST", "GET", "GET", "GET"]


def test_the_async_client_retries_a_503_and_keeps_the_append_key():
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if len(sent) == 1:
            return _error(503, "SERVICE_UNAVAILABLE", **{"Retry-After": "0"})
        return httpx.Response(200, json={"messages": [{"seq": 1}], "budget": {}})

    async def run() -> dict:
        async with AsyncClient(
            "http://svc", "cx_k", retry=FAST, transport=httpx.MockTransport(handler)
        ) as c:
            return await c.session("s").append([{"role": "user", "content": "hi"}])

    assert asyncio.run(run())["messages"] == [{"seq": 1}]
    assert len(sent) == 2
    assert sent[0].headers["Idempotency-Key"] == sent[1].headers["Idempotency-Key"]
    assert sent[0].url.path == "/api/v1/sessions/s/messages"
