"""A proxy view's request lets go of the body it read once the view returns.

Django's ASGI handler leaves each request in a reference cycle, so a request
that kept the parsed history (thousands of objects on a long session) kept it
until a garbage collection: scanned, promoted and collected on every call
(``gate.body_released``).
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import resolve

from proxy import gate
from proxy.providers import ANTHROPIC

BODY = {
    "model": "claude-opus-4-5",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "marker-4711"}],
}


def _request():
    return RequestFactory().post(
        "/proxy/anthropic/v1/messages", data=json.dumps(BODY), content_type="application/json"
    )


def test_the_checked_body_and_its_bytes_go_when_the_view_returns():
    seen = {}

    @gate.body_released
    async def view(request):
        seen["body"] = gate.read(request, ANTHROPIC)
        seen["again"] = gate.read(request, ANTHROPIC)  # read once, then from the request
        return HttpResponse("ok")

    request = _request()
    response = async_to_sync(view)(request)
    assert response.content == b"ok"
    assert seen["body"]["messages"][0]["content"] == "marker-4711"
    assert seen["again"] is seen["body"]
    assert "_gated_body" not in request.__dict__
    assert "_body" not in request.__dict__


def test_the_body_goes_when_the_view_raises_too():
    @gate.body_released
    async def view(request):
        gate.read(request, ANTHROPIC)
        raise RuntimeError("boom")

    request = _request()
    with pytest.raises(RuntimeError):
        async_to_sync(view)(request)
    assert "_gated_body" not in request.__dict__


@pytest.mark.parametrize(
    "path",
    [
        "/proxy/anthropic/v1/messages",
        "/proxy/anthropic/v1/messages/count_tokens",
        "/proxy/openai/v1/chat/completions",
        "/proxy/openai/v1/responses",
        "/proxy/openai/v1/responses/compact",
        "/proxy/gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent",
    ],
)
def test_every_proxy_view_that_reads_a_body_releases_it(path):
    assert getattr(resolve(path).func, "releases_body", False), path
