"""The Responses route's refusals and recoveries: provider-shaped errors, credentials, overflow, built-ins."""

from __future__ import annotations

import openai
import pytest
from asgiref.sync import async_to_sync

from compaction.models import CompactionRun
from fakes.responses_server import estimate_tokens
from fakes.streams import ScriptedReply, tool_call
from sessions.models import Message, Session
from sessions.services.sessions import session_create
from tests.proxy import responses_fixtures
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY, asgi_http
from tests.proxy.responses_fixtures import asgi_responses

pytestmark = PROXY_DB
fake_responses = responses_fixtures.fake_responses

MODEL = "gpt-5.1"
TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]


def test_bad_bodies_are_openai_shaped_400s(fake_responses, alice_key):
    async def run():
        async with asgi_http() as http:
            headers = {"X-Contextsvc-Key": alice_key[1], "Authorization": f"Bearer {UPSTREAM_KEY}"}
            url = "http://localhost/proxy/openai/v1/responses"
            bad_json = await http.post(url, content=b"{", headers=headers)
            bad_input = await http.post(url, json={"model": MODEL, "input": 3}, headers=headers)
            bad_role = await http.post(
                url, json={"model": MODEL, "input": [{"role": "robot", "content": "x"}]},
                headers=headers,
            )  # fmt: skip
            return bad_json, bad_input, bad_role

    for response in async_to_sync(run)():
        assert response.status_code == 400
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
    assert not fake_responses.responses_requests()


def test_unknown_agent_key_is_a_401(fake_responses):
    async def run():
        client = asgi_responses("cs_live_not_a_key")
        with pytest.raises(openai.AuthenticationError):
            await client.responses.create(model=MODEL, input="hi")

    async_to_sync(run)()


def test_unreachable_upstream_is_a_502_and_the_input_is_kept(settings, alice_key):
    settings.CONTEXTSVC_UPSTREAM_OPENAI_URL = "http://127.0.0.1:9/v1"

    async def run():
        client = asgi_responses(alice_key[1], session="ses_r502")
        with pytest.raises(openai.APIStatusError) as raised:
            await client.responses.create(model=MODEL, input="keep me")
        return raised.value

    error = async_to_sync(run)()
    assert error.status_code == 502
    assert Message.objects.filter(session__external_id="ses_r502", content="keep me").exists()


def test_managed_credentials_and_the_client_session_header(fake_responses, settings, alice_key):
    settings.CONTEXTSVC_UPSTREAM_OPENAI_API_KEY = UPSTREAM_KEY
    fake_responses.script(ScriptedReply(text="managed"))

    async def run():
        client = openai.AsyncOpenAI(
            base_url="http://localhost/proxy/openai/v1",
            api_key=alice_key[1],  # the agent key as the provider key
            default_headers={"session-id": "thread-7"},
            http_client=asgi_http(),
            max_retries=0,
        )
        return await client.responses.with_raw_response.create(model=MODEL, input="hi")

    raw = async_to_sync(run)()
    assert raw.parse().output_text == "managed"
    assert raw.headers["x-contextsvc-session"] == "thread-7"
    sent = fake_responses.responses_requests()[-1]
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert sent.headers["session-id"] == "thread-7"  # the client's headers pass through


def test_context_length_exceeded_compacts_and_retries_once(fake_responses, alice_key):
    fake = fake_responses
    session_create(
        owner=alice_key[0],
        data={
            "id": "ses_rovf",
            "model": MODEL,
            "context_window": 60_000,
            "max_output_tokens": 2_000,
        },
    )
    fake.script(*(ScriptedReply(tool_calls=[tool_call("read_file", {"n": k})]) for k in range(6)))
    fake.script(ScriptedReply(text="fits again"))

    async def run():
        client = asgi_responses(alice_key[1], session="ses_rovf")
        items: list[dict] = [{"role": "user", "content": "read them all"}]
        for _ in range(6):
            response = await client.responses.create(model=MODEL, input=items, tools=TOOLS)
            items += [i.model_dump(exclude_none=True) for i in response.output]
            call_id = response.output[-1].call_id
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": "y" * 24_000}
            )
        # a smaller model behind the same name: what the proxy sent last no longer fits
        fake.window = estimate_tokens(fake.responses_requests()[-1].body) * 3 // 4
        return await client.responses.create(model=MODEL, input=items, tools=TOOLS)

    final = async_to_sync(run)()
    assert final.output_text == "fits again"
    statuses = [r.status for r in fake.responses_requests()[-2:]]
    assert statuses == [400, 200]
    assert CompactionRun.objects.filter(
        session__external_id="ses_rovf", trigger=CompactionRun.Trigger.EMERGENCY
    ).exists()


def test_builtin_calls_are_run_inside_while_streaming(fake_responses, alice_key):
    fake_responses.script(
        ScriptedReply(tool_calls=[tool_call("tool_output_cache", {"ref_id": "out_x"})]),
        ScriptedReply(text="Answered after the built-in."),
    )

    async def run():
        client = asgi_responses(alice_key[1], session="ses_rbi")
        async with client.responses.stream(model=MODEL, input="go", tools=TOOLS) as stream:
            events = [event async for event in stream]
            return events, await stream.get_final_response()

    events, final = async_to_sync(run)()
    assert [i.type for i in final.output] == ["message"]
    assert final.output_text == "Answered after the built-in."
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [(e.output_index, e.item.type) for e in added] == [(0, "message")]
    assert [e.type for e in events].count("response.created") == 1
    sequence = [e.sequence_number for e in events]
    assert sequence == list(range(len(sequence)))
    roles = Message.objects.filter(session__external_id="ses_rbi").order_by("seq")
    assert [m.role for m in roles] == ["user", "assistant", "tool", "assistant"]
    session = Session.objects.get(external_id="ses_rbi")
    assert session.provider == "openai" and session.context_window == 400_000  # its profile


def test_upstream_429_passes_through_and_the_input_is_kept(fake_responses, alice_key):
    fake_responses.fail_next(429)

    async def run():
        client = asgi_responses(alice_key[1], session="ses_r429")
        with pytest.raises(openai.RateLimitError):
            await client.responses.create(model=MODEL, input="remember this")

    async_to_sync(run)()
    assert Message.objects.filter(session__external_id="ses_r429", content="remember this").exists()
