"""A proxy set up wrong says so at once: a missing server key, an upstream it cannot reach.

Managed credentials (the client sends no provider key of its own) on a server
without the provider's key are refused before anything is counted, written or
forwarded, with a status no SDK retries (403, ``x-should-retry: false``) and a
message naming the setting; an unreachable upstream is named with the setting
that chose it. The log lines of a call name its session, its record and both
statuses; an upstream error relayed is not logged by Django as our own.
"""

from __future__ import annotations

import logging
import time

import anthropic
import openai
import pytest
from asgiref.sync import async_to_sync

from fakes.claude_code import run_claude
from proxy.models import ClientView, StoredResponse
from sessions.models import ContextCall, Message, Session
from tests.live_server import free_port
from tests.proxy import responses_fixtures
from tests.proxy.claude_code_live import start_proxy
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY, asgi_claude, asgi_http

pytestmark = PROXY_DB
fake_responses = responses_fixtures.fake_responses

MODEL = "claude-opus-4-5"
ROWS = (Session, Message, ContextCall, ClientView, StoredResponse)
ROUTES = {
    "anthropic": ("/proxy/anthropic/v1/messages", "ANTHROPIC"),
    "chat": ("/proxy/openai/v1/chat/completions", "OPENAI"),
    "responses": ("/proxy/openai/v1/responses", "OPENAI"),
}
BODIES = {
    "anthropic": {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    "chat": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    "responses": {"model": "gpt-5.1", "input": "hi"},
}


def post(path: str, body: dict, headers: dict[str, str]):
    async def call():
        async with asgi_http() as http:
            return await http.post(f"http://localhost{path}", json=body, headers=headers)

    return async_to_sync(call)()


def rows() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in ROWS}


def provider_error(api: str, response) -> dict:
    """The error object, after checking the whole body is the provider's shape."""
    body = response.json()
    if api == "anthropic":
        assert set(body) == {"type", "error"} and body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
    else:
        assert set(body) == {"error"}
        assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.fixture
def upstream_for(request, settings):
    """The fake upstream an API's calls go to (Responses: the fake Responses API)."""

    def pick(api: str):
        if api == "responses":
            return request.getfixturevalue("fake_responses")
        fake_anthropic, fake_openai = request.getfixturevalue("upstreams")
        return fake_anthropic if api == "anthropic" else fake_openai

    return pick


# --- managed credentials, no server key --------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "chat", "responses"])
def test_managed_credentials_without_a_server_key_are_refused_before_anything(
    upstream_for, alice_key, api
):
    fake = upstream_for(api)
    path, vendor = ROUTES[api]
    setting = f"CONTEXTSVC_UPSTREAM_{vendor}_API_KEY"
    before = rows()
    # The agent key as the API key, and the agent key in its header with no provider key.
    as_api_key = post(path, BODIES[api], {"authorization": f"Bearer {alice_key[1]}"})
    keyless = post(path, BODIES[api], {"x-contextsvc-key": alice_key[1]})
    for response in (as_api_key, keyless):
        assert response.status_code == 403
        assert response.headers["x-should-retry"] == "false"
        error = provider_error("anthropic" if api == "anthropic" else "openai", response)
        assert error["type"] == "permission_error"
        assert error["message"].startswith("contextsvc proxy: managed credentials are on")
        assert f"no {setting} (or {setting}_FILE)" in error["message"]
        assert "X-Contextsvc-Key" in error["message"]  # the other way: pass-through
    assert fake.requests == []
    assert rows() == before


def test_an_existing_session_is_refused_the_same_and_keeps_its_transcript(upstreams, alice_key):
    fake, _ = upstreams

    async def pass_through():
        client = asgi_claude(alice_key[1], session="ses_setup1")
        return await client.messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "first"}]
        )

    reply = async_to_sync(pass_through)()
    sent = len(fake.requests)
    before = rows()
    history = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
        {"role": "user", "content": "second, without a key"},
    ]
    body = {"model": MODEL, "max_tokens": 8, "messages": history}
    headers = {"x-contextsvc-key": alice_key[1], "x-contextsvc-session": "ses_setup1"}
    response = post("/proxy/anthropic/v1/messages", body, headers)
    assert response.status_code == 403
    assert (
        "CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY" in provider_error("anthropic", response)["message"]
    )
    assert len(fake.requests) == sent and rows() == before


def test_an_unknown_agent_key_stays_a_401_on_a_server_without_a_key(upstreams):
    response = post(
        ROUTES["anthropic"][0], BODIES["anthropic"], {"authorization": "Bearer cs_live_nokey"}
    )
    assert response.status_code == 401
    assert provider_error("anthropic", response)["type"] == "authentication_error"


def test_side_routes_are_refused_too_but_not_the_proxys_own_store(
    upstreams, fake_responses, alice_key
):
    fake_anthropic, _ = upstreams
    managed = {"authorization": f"Bearer {alice_key[1]}"}

    async def calls():
        async with asgi_http() as http:
            count = await http.post(
                "http://localhost/proxy/anthropic/v1/messages/count_tokens",
                json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                headers=managed,
            )
            models = await http.get("http://localhost/proxy/anthropic/v1/models", headers=managed)
            stored = await http.get(
                "http://localhost/proxy/openai/v1/responses/resp_unknown", headers=managed
            )
            return count, models, stored

    count, models, stored = async_to_sync(calls)()
    assert count.status_code == models.status_code == 403
    assert fake_anthropic.requests == [] and fake_responses.requests == []
    # Reading the proxy's own store goes nowhere upstream: no key needed, a plain 404.
    assert stored.status_code == 404


def test_the_anthropic_sdk_does_not_retry_the_missing_key(upstreams, alice_key):
    sent: list[str] = []

    async def call():
        async def count(request):
            sent.append(str(request.url))

        http = asgi_http()
        http.event_hooks["request"] = [count]
        client = anthropic.AsyncAnthropic(  # max_retries: the SDK's default (2)
            base_url="http://localhost/proxy/anthropic", api_key=alice_key[1], http_client=http
        )
        assert client.max_retries == 2
        with pytest.raises(anthropic.PermissionDeniedError) as raised:
            await client.messages.create(
                model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        return raised.value

    error = async_to_sync(call)()
    assert sent == ["http://localhost/proxy/anthropic/v1/messages"]  # one request, no retry
    assert "CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY" in error.message


def test_the_openai_sdk_does_not_retry_the_missing_key(upstreams, alice_key):
    sent: list[str] = []

    async def call():
        async def count(request):
            sent.append(str(request.url))

        http = asgi_http()
        http.event_hooks["request"] = [count]
        client = openai.AsyncOpenAI(
            base_url="http://localhost/proxy/openai/v1", api_key=alice_key[1], http_client=http
        )
        with pytest.raises(openai.PermissionDeniedError) as raised:
            await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
        return raised.value

    error = async_to_sync(call)()
    assert len(sent) == 1
    assert "CONTEXTSVC_UPSTREAM_OPENAI_API_KEY" in error.message


# --- an upstream out of reach ------------------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "chat", "responses"])
def test_an_unreachable_upstream_is_named_with_its_setting(settings, alice_key, api):
    port = free_port()  # nothing listens there
    path, vendor = ROUTES[api]
    if vendor == "ANTHROPIC":
        settings.CONTEXTSVC_UPSTREAM_ANTHROPIC_URL = f"http://127.0.0.1:{port}"
    else:
        settings.CONTEXTSVC_UPSTREAM_OPENAI_URL = f"http://127.0.0.1:{port}/v1"
    headers = {"x-contextsvc-key": alice_key[1], "authorization": f"Bearer {UPSTREAM_KEY}"}
    response = post(path, {**BODIES[api], "stream": True}, headers)
    assert response.status_code == 502
    error = provider_error("anthropic" if api == "anthropic" else "openai", response)
    assert error["message"] == (
        f"contextsvc proxy: cannot reach the upstream http://127.0.0.1:{port} "
        f"(CONTEXTSVC_UPSTREAM_{vendor}_URL): connection refused"
    )
    assert response.headers["x-contextsvc-session"]  # the call's session, its message kept


def test_an_upstream_timeout_names_the_upstream_and_both_settings(upstreams, settings, alice_key):
    _, fake = upstreams
    settings.CONTEXTSVC_UPSTREAM_READ_TIMEOUT = 1
    fake.hang_next(3)
    headers = {"x-contextsvc-key": alice_key[1], "authorization": f"Bearer {UPSTREAM_KEY}"}
    response = post(ROUTES["chat"][0], BODIES["chat"], headers)
    assert response.status_code == 504
    message = provider_error("openai", response)["message"]
    assert message == (
        f"contextsvc proxy: the upstream {fake.base_url} (CONTEXTSVC_UPSTREAM_OPENAI_URL) did "
        "not answer within 1 s (CONTEXTSVC_UPSTREAM_READ_TIMEOUT)"
    )


# --- the log lines -----------------------------------------------------------------------


def call_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "proxy.calllog"]


def django_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django.request"]


def test_a_call_logs_its_session_record_and_both_statuses(upstreams, alice_key, caplog):
    caplog.set_level(logging.INFO)

    async def calls():
        client = asgi_claude(alice_key[1], session="ses_log1")
        messages = [{"role": "user", "content": "hi"}]
        await client.messages.create(model=MODEL, max_tokens=8, messages=messages)
        stream = await client.messages.create(
            model=MODEL, max_tokens=8, messages=messages, stream=True
        )
        async for _ in stream:
            pass

    async_to_sync(calls)()
    records = list(ContextCall.objects.filter(session__external_id="ses_log1").order_by("id"))
    lines = call_lines(caplog)
    assert [line.getMessage() for line in lines] == [
        f"proxy anthropic: session=ses_log1 call={records[0].pk} status=200 upstream=200",
        f"proxy anthropic: session=ses_log1 call={records[1].pk} status=200 upstream=200: "
        "stream ended",
    ]
    assert lines[0].contextsvc_session == "ses_log1"
    assert lines[0].contextsvc_call == records[0].pk
    assert (lines[0].contextsvc_status, lines[0].contextsvc_upstream_status) == (200, 200)


@pytest.mark.parametrize("status,kind", [(500, "api_error"), (529, "overloaded_error")])
def test_an_upstream_error_relayed_is_our_warning_not_djangos_server_error(
    upstreams, alice_key, caplog, status, kind
):
    fake, _ = upstreams
    fake.fail_next(status)
    caplog.set_level(logging.INFO)
    headers = {"x-contextsvc-key": alice_key[1], "x-api-key": UPSTREAM_KEY}
    headers["x-contextsvc-session"] = "ses_log2"
    response = post(ROUTES["anthropic"][0], BODIES["anthropic"], headers)
    assert response.status_code == status
    assert response.json()["error"]["type"] == kind  # upstream's answer, relayed as it came
    record = ContextCall.objects.get(session__external_id="ses_log2")
    (line,) = call_lines(caplog)
    assert line.levelno == logging.WARNING
    assert line.getMessage() == (
        f"proxy anthropic: session=ses_log2 call={record.pk} status={status} "
        f"upstream={status}: upstream {status} {kind}: fake failure {status}"
    )
    assert django_lines(caplog) == []  # no "Internal Server Error" / "Unknown Status Code"


def test_an_unreachable_upstream_is_our_warning_not_djangos_error(settings, alice_key, caplog):
    settings.CONTEXTSVC_UPSTREAM_ANTHROPIC_URL = f"http://127.0.0.1:{free_port()}"
    caplog.set_level(logging.INFO)
    headers = {"x-contextsvc-key": alice_key[1], "x-api-key": UPSTREAM_KEY}
    headers["x-contextsvc-session"] = "ses_log3"
    assert post(ROUTES["anthropic"][0], BODIES["anthropic"], headers).status_code == 502
    (line,) = call_lines(caplog)
    record = ContextCall.objects.get(session__external_id="ses_log3")
    assert line.levelno == logging.WARNING
    assert line.getMessage().startswith(
        f"proxy anthropic: session=ses_log3 call={record.pk} status=502 upstream=-: "
        "contextsvc proxy: cannot reach the upstream http://127.0.0.1:"
    )
    assert django_lines(caplog) == []


def test_the_missing_key_is_one_warning_naming_the_setting(upstreams, alice_key, caplog):
    caplog.set_level(logging.INFO)
    post(ROUTES["chat"][0], BODIES["chat"], {"authorization": f"Bearer {alice_key[1]}"})
    (line,) = call_lines(caplog)
    assert line.levelno == logging.WARNING
    assert "status=403" in line.getMessage()
    assert "CONTEXTSVC_UPSTREAM_OPENAI_API_KEY" in line.getMessage()
    assert django_lines(caplog) == []
    assert alice_key[1] not in caplog.text  # the agent key is never logged


def test_a_bug_of_ours_is_still_djangos_server_error(upstreams, alice_key, caplog, monkeypatch):
    async def broken(call):
        raise RuntimeError("a bug")

    monkeypatch.setattr("proxy.views.forward", broken)
    headers = {"x-contextsvc-key": alice_key[1], "x-api-key": UPSTREAM_KEY}
    response = post(ROUTES["anthropic"][0], BODIES["anthropic"], headers)
    assert response.status_code == 500
    (logged,) = django_lines(caplog)
    assert logged.levelno == logging.ERROR and logged.getMessage().startswith(
        "Internal Server Error"
    )


# --- Claude Code on a server without the key ---------------------------------------------


@pytest.mark.needs_postgres
@pytest.mark.needs_agents
def test_claude_code_stops_at_once_and_shows_the_setting(tmp_path, fake_anthropic, alice_key):
    """It retries an upstream 401 (it re-reads its key) until it gives up; our 403 it shows."""
    with start_proxy(tmp_path, fake_anthropic, managed=False) as port:
        started = time.monotonic()
        code, result, err = run_claude(
            f"http://127.0.0.1:{port}/proxy/anthropic", alice_key[1], tmp_path / "home", timeout=90
        )
        took = time.monotonic() - started
    refusals = (tmp_path / "proxy.log").read_text().count("status=403")
    assert code != 0
    assert "CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY" in f"{result} {err}"
    assert fake_anthropic.requests == []
    assert 1 <= refusals <= 2, refusals
    assert took < 60, took  # retrying, it would call for minutes
