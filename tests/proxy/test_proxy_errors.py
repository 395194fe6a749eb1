"""The proxy's refusals and upstream failures, in the provider's error shape; what was sent is kept."""

from __future__ import annotations

import anthropic
import openai
import pytest
from asgiref.sync import async_to_sync

from compaction.models import CompactionRun
from compaction.reason_text import reason_text
from proxy.providers import ANTHROPIC, OPENAI, RESPONSES
from sessions.models import ContextCall, Message, Session
from tests.live_server import free_port
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY, asgi_claude, asgi_gpt, asgi_http

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"


def claude_call(key: str, sid: str | None, messages: list[dict], **client_kwargs):
    async def call():
        client = asgi_claude(key, session=sid, **client_kwargs)
        return await client.messages.create(model=MODEL, max_tokens=256, messages=messages)

    return async_to_sync(call)()


def raw_post(path: str, content: bytes, headers: dict[str, str]):
    async def call():
        async with asgi_http() as http:
            return await http.post(f"http://localhost{path}", content=content, headers=headers)

    return async_to_sync(call)()


def test_bad_json_and_bad_fields_are_provider_shaped_400s(upstreams, alice_key):
    headers = {"x-contextsvc-key": alice_key[1], "content-type": "application/json"}
    response = raw_post("/proxy/anthropic/v1/messages", b"{not json", headers)
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    response = raw_post("/proxy/openai/v1/chat/completions", b'{"model": "gpt-4o"}', headers)
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_unknown_agent_key_is_a_401_the_sdk_raises(upstreams):
    with pytest.raises(anthropic.AuthenticationError):
        claude_call("cx_not_a_key", "ses_e1", [{"role": "user", "content": "hi"}])

    async def gpt():
        client = asgi_gpt("cx_not_a_key")
        return await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )

    with pytest.raises(openai.AuthenticationError):
        async_to_sync(gpt)()


@pytest.mark.parametrize(
    "status,error", [(429, anthropic.RateLimitError), (500, anthropic.InternalServerError)]
)
def test_upstream_errors_pass_through_and_the_message_is_stored(
    upstreams, alice_key, status, error
):
    fake, _ = upstreams
    fake.fail_next(status)
    with pytest.raises(error) as raised:
        claude_call(alice_key[1], "ses_e2", [{"role": "user", "content": "keep me"}])
    assert raised.value.status_code == status
    assert raised.value.body["error"]["message"] == f"fake failure {status}"
    session = Session.objects.get(external_id="ses_e2")
    assert list(Message.objects.filter(session=session).values_list("role", flat=True)) == ["user"]


def test_unreachable_upstream_is_a_502(upstreams, settings, alice_key):
    settings.CONTEXTSVC_UPSTREAM_ANTHROPIC_URL = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(anthropic.APIStatusError) as raised:
        claude_call(alice_key[1], "ses_e3", [{"role": "user", "content": "still stored"}])
    assert raised.value.status_code == 502
    assert Message.objects.filter(session__external_id="ses_e3").count() == 1
    # The build was made: its record is written when the forward fails too.
    assert ContextCall.objects.filter(session__external_id="ses_e3").count() == 1


def test_prompt_too_long_upstream_compacts_and_retries_once(upstreams, alice_key):
    fake, _ = upstreams
    key, history = alice_key[1], []
    for n in range(12):
        history.append({"role": "user", "content": f"question {n}: " + "lorem ipsum dolor " * 1000})
        reply = claude_call(key, "ses_e4", history)
        history.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
    history.append({"role": "user", "content": "last question"})
    fake.window = 30_000  # a smaller model than the profile's: the history no longer fits
    before = len(fake.messages_requests())
    reply = claude_call(key, "ses_e4", history)
    assert reply.content
    attempts = fake.messages_requests()[before:]
    assert [r.status for r in attempts] == [400, 200]
    # Both builds recorded (the refused one first), the last completed by the usage.
    records = list(ContextCall.objects.filter(session__external_id="ses_e4").order_by("id"))
    assert len(records) == 12 + 2
    assert records[-2].completed_at is None and records[-1].completed_at is not None
    assert Session.objects.get(external_id="ses_e4").context_window == 30_000
    # The run records why (docs/concepts/compaction.md#reasons): upstream's count and maximum,
    # the window the session had before it took upstream's.
    run = CompactionRun.objects.get(session__external_id="ses_e4", trigger="emergency")
    reason = run.reason
    assert reason["kind"] == "overflow" and reason["source"] == "proxy"
    assert reason["reported_tokens"] > reason["limit"] == 30_000
    assert reason["context_window"] == 30_000 and reason["previous_context_window"] > 30_000
    assert reason_text(reason).startswith(
        f"upstream answered context overflow: the request was {reason['reported_tokens']:,}"
        " tokens > 30,000 maximum; our estimate was "
    )
    assert reason_text(reason).endswith(
        f"the session's context window went from {reason['previous_context_window']:,} to 30,000"
    )


@pytest.mark.parametrize(
    "dialect,message,size,window",
    [
        (ANTHROPIC, "prompt is too long: 210000 tokens > 200000 maximum", 210_000, 200_000),
        (
            OPENAI,
            "This model's maximum context length is 8192 tokens. However, your messages"
            " resulted in 9000 tokens. Please reduce the length of the messages.",
            9_000,
            8_192,
        ),
        (
            RESPONSES,
            "maximum context length is 8192 tokens, you requested 9001 tokens",
            9_001,
            8_192,
        ),
        (ANTHROPIC, "prompt is too long", None, None),
    ],
)
def test_an_overflow_answer_gives_the_request_size_and_the_maximum(dialect, message, size, window):
    body = {"error": {"message": message}}
    assert (dialect.reported_size(body), dialect.reported_window(body)) == (size, window)
    assert dialect.reported_size("not a body") is None


def test_managed_credentials_and_a_derived_session(upstreams, settings, alice_key):
    fake, _ = upstreams
    settings.CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY = UPSTREAM_KEY

    async def call(messages):
        client = anthropic.AsyncAnthropic(
            base_url="http://localhost/proxy/anthropic",
            api_key=alice_key[1],  # the agent key as the provider key
            http_client=asgi_http(),
            max_retries=0,
        )
        raw = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=256, system="be brief", messages=messages
        )
        return raw.headers["x-contextsvc-session"], await raw.parse()

    history = [{"role": "user", "content": "one conversation"}]
    sid, first = async_to_sync(call)(history)
    history += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "and more"},
    ]
    sid2, _ = async_to_sync(call)(history)
    other, _ = async_to_sync(call)([{"role": "user", "content": "another conversation"}])
    assert sid == sid2 != other and sid.startswith("px_")
    assert fake.messages_requests()[-1].headers["x-api-key"] == UPSTREAM_KEY
    assert Message.objects.filter(session__external_id=sid).count() == 4


def test_upstream_timeout_is_a_504_and_unknown_paths_a_provider_404(upstreams, settings, alice_key):
    _, fake = upstreams
    settings.CONTEXTSVC_UPSTREAM_READ_TIMEOUT = 1
    fake.hang_next(3)

    async def gpt():
        client = asgi_gpt(alice_key[1], session="ses_e5")
        return await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "slow"}]
        )

    with pytest.raises(openai.APIStatusError) as raised:
        async_to_sync(gpt)()
    assert raised.value.status_code == 504
    assert Message.objects.filter(session__external_id="ses_e5").count() == 1
    response = raw_post("/proxy/openai/v1/embeddings", b"{}", {})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


def test_openai_context_length_exceeded_compacts_and_retries_once(upstreams, alice_key):
    _, fake = upstreams
    history: list[dict] = []

    async def call():
        client = asgi_gpt(alice_key[1], session="ses_e6")
        return await client.chat.completions.create(model="gpt-4o", messages=history)

    for n in range(12):
        history.append({"role": "user", "content": f"question {n}: " + "lorem ipsum dolor " * 1000})
        reply = async_to_sync(call)()
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    history.append({"role": "user", "content": "last question"})
    fake.window = 30_000
    before = len(fake.chat_requests())
    assert async_to_sync(call)().choices[0].message.content
    assert [r.status for r in fake.chat_requests()[before:]] == [400, 200]
    assert Session.objects.get(external_id="ses_e6").context_window == 30_000
