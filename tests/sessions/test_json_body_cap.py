"""An API JSON body over CONTEXTSVC_MAX_API_JSON_BYTES is a 413 from its headers:
the body is never read, nothing is written, and the answer names the limit and
the streamed upload to use instead; the raw upload and the proxy are not capped."""

from __future__ import annotations

import json

import pytest
from django.test import RequestFactory

from contextsvc.bodycap import JsonBodyCapMiddleware
from contextsvc.settings import CONTEXTSVC_MAX_API_JSON_BYTES as SHIPPED_CAP
from contextsvc.settings import CONTEXTSVC_MAX_JSON_BODY
from sessions.models import Message
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

CAP = 64 * 1024


@pytest.fixture(autouse=True)
def _small_cap(settings):
    settings.CONTEXTSVC_MAX_API_JSON_BYTES = CAP


class UnreadableBody:
    """A request body that fails the test if anything reads it."""

    failed = False  # gunicorn's flag: True closes the connection undrained

    def read(self, *args):
        raise AssertionError("the body was read")

    readline = read


def append(content: str) -> dict:
    return {"messages": [{"role": "user", "content": content}]}


def test_an_append_over_the_cap_is_a_413_naming_the_limit_and_the_upload(alice, make_session):
    sid = make_session()["id"]
    response = alice.post(f"sessions/{sid}/messages", append("x" * CAP))
    assert response.status_code == 413, response.content
    error = response.json()["error"]
    assert error["code"] == "PAYLOAD_TOO_LARGE"
    assert error["details"]["limit"] == CAP and error["details"]["size"] > CAP
    assert error["details"]["field"] == "Content-Length"
    assert error["details"]["upload"] == f"PUT /api/v1/sessions/{sid}/outputs"
    assert f"limit of {CAP} bytes" in error["message"]
    assert "CONTEXTSVC_MAX_API_JSON_BYTES" in error["message"]
    assert "output_ref" in error["message"]
    assert response["X-Request-Id"]
    assert not Message.objects.filter(session__external_id=sid).exists()


def test_an_append_at_the_cap_goes_through(alice, make_session):
    sid = make_session()["id"]
    overhead = len(json.dumps(append("")))
    response = alice.post(f"sessions/{sid}/messages", append("x" * (CAP - overhead)))
    assert response.status_code == 200, response.content[:300]


def test_every_api_json_body_is_capped_not_only_appends(alice, make_session):
    sid = make_session()["id"]
    tools = [{"name": f"t{n}", "description": "d" * 1000} for n in range(100)]
    response = alice.put(f"sessions/{sid}/tools", {"tools": tools})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


def test_the_refusal_never_reads_the_body_and_ends_the_connection(settings):
    request = RequestFactory().post("/api/v1/sessions/s1/messages", b"", "application/json")
    body = UnreadableBody()
    request.META.update({"CONTENT_LENGTH": str(30_000_000), "wsgi.input": body})
    never = JsonBodyCapMiddleware(lambda r: pytest.fail("reached the view"))
    response = never(request)
    assert response.status_code == 413
    assert body.failed  # the server closes the connection instead of draining 30 MB


def test_outside_the_api_nothing_is_capped():
    request = RequestFactory().post("/proxy/anthropic/v1/messages", b"", "application/json")
    request.META["CONTENT_LENGTH"] = str(30_000_000)
    passed = JsonBodyCapMiddleware(lambda r: "the view's answer")(request)
    assert passed == "the view's answer"


def test_the_streamed_upload_is_not_capped_and_is_the_way_for_a_big_output(alice, make_session):
    sid = make_session()["id"]
    data = "".join(f"row {i:06d} {'y' * 100}\n" for i in range(2000)).encode()  # ~220 KB
    assert len(data) > CAP
    up = alice.request("PUT", f"sessions/{sid}/outputs", raw=data, headers={"X-Tool-Name": "dump"})
    assert up.status_code == 201, up.content
    turn = tool_turn("c1", "")
    del turn[1]["content"]
    turn[1]["output_ref"] = up.json()["id"]
    response = alice.post(f"sessions/{sid}/messages", {"messages": turn})
    assert response.status_code == 200, response.content
    assert response.json()["messages"][-1]["ref"]["byte_size"] == len(data)


def test_the_shipped_cap_is_a_few_megabytes_below_the_global_body_limit():
    assert SHIPPED_CAP == 4 * 1024 * 1024 < CONTEXTSVC_MAX_JSON_BODY
