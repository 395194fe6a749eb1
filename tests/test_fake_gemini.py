"""The fake Gemini API: its routes, its key check, scripted replies, and the 400s it gives
for what the real API refuses, in the real error shape."""

from __future__ import annotations

import httpx
import pytest

from contextsvc.engine.providers.gemini_stream import GeminiStream, reply_from_response
from contextsvc.engine.providers.sse import SseParser
from fakes.gemini_rules import COUNT_RULE, RESPONSE_PLACE_RULE
from fakes.gemini_server import FakeGemini
from fakes.streams import ScriptedReply, tool_call

KEY = {"x-goog-api-key": "test-key"}
SHELL = "run_shell_command"
CALL = {"role": "model", "parts": [{"functionCall": {"name": SHELL, "args": {"command": "ls"}}}]}
ANSWER = {
    "role": "user",
    "parts": [{"functionResponse": {"name": SHELL, "response": {"output": "a"}}}],
}
ASK = {"role": "user", "parts": [{"text": "List files"}]}


@pytest.fixture
def fake():
    with FakeGemini(api_key="test-key") as server:
        yield server


def generate(fake, body, *, method="generateContent", **kw):
    url = f"{fake.base_url}/v1beta/models/gemini-fake-pro:{method}"
    return httpx.post(url, json=body, headers=kw.pop("headers", KEY), **kw)


def refusal(response) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    return error["message"]


def test_generate_answers_scripted_calls_without_ids_and_usage(fake):
    fake.script(ScriptedReply(text="Listing.", tool_calls=[tool_call(SHELL, {"command": "ls"})]))
    response = generate(fake, {"contents": [ASK]})
    assert response.status_code == 200
    body = response.json()
    parts = body["candidates"][0]["content"]["parts"]
    assert parts == [
        {"text": "Listing."},
        {"functionCall": {"name": SHELL, "args": {"command": "ls"}}},
    ]
    assert body["usageMetadata"]["promptTokenCount"] > 0
    reply = reply_from_response(body)
    assert reply.message["tool_calls"][0]["name"] == SHELL and reply.stop_reason == "STOP"


def test_stream_with_alt_sse_is_read_by_the_accumulator(fake):
    fake.script(ScriptedReply(text="Hello there, world.", tool_calls=[tool_call(SHELL, {})]))
    response = generate(
        fake, {"contents": [ASK]}, method="streamGenerateContent", params={"alt": "sse"}
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    parser, stream = SseParser(), GeminiStream()
    for event in parser.feed(response.content):
        stream.feed(event)
    reply = stream.result()
    assert not reply.incomplete
    assert reply.message["content"][0]["text"] == "Hello there, world."
    assert reply.message["tool_calls"][0]["name"] == SHELL
    assert reply.usage.output_tokens > 0


def test_key_by_header_or_query_and_refusals(fake):
    assert generate(fake, {"contents": [ASK]}, headers={}).status_code == 403
    bad = generate(fake, {"contents": [ASK]}, headers={"x-goog-api-key": "nope"})
    assert "API key not valid" in refusal(bad)
    by_query = generate(fake, {"contents": [ASK]}, headers={}, params={"key": "test-key"})
    assert by_query.status_code == 200


def test_count_tokens_and_models(fake):
    count = generate(fake, {"contents": [ASK]}, method="countTokens")
    assert count.status_code == 200 and count.json()["totalTokens"] > 0
    models = httpx.get(f"{fake.base_url}/v1beta/models", headers=KEY).json()["models"]
    assert [m["name"] for m in models] == ["models/gemini-fake-pro", "models/gemini-fake-flash"]


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        ([], "contents is not specified"),
        ([{"role": "system", "parts": [{"text": "x"}]}], "Please use a valid role: user, model."),
        ([{"role": "assistant", "parts": [{"text": "x"}]}], "valid role"),
        ([{"role": "user", "parts": []}], "contents.parts must not be empty"),
        ([{"role": "user", "parts": [{}]}], "required oneof field 'data'"),
        # A call with no response after it, or a text turn after it.
        ([ASK, CALL], COUNT_RULE),
        ([ASK, CALL, ASK], COUNT_RULE),
        # Two calls, one response.
        (
            [ASK, {"role": "model", "parts": CALL["parts"] * 2}, ANSWER],
            COUNT_RULE,
        ),
        # A response with no call before it.
        ([ASK, {"role": "model", "parts": [{"text": "hi"}]}, ANSWER], RESPONSE_PLACE_RULE),
        ([ANSWER], RESPONSE_PLACE_RULE),
        # A call that does not follow a user turn.
        ([CALL, ANSWER], "function call turn comes immediately after a user turn"),
        # Names that do not match.
        (
            [
                ASK,
                CALL,
                {
                    "role": "user",
                    "parts": [{"functionResponse": {"name": "other", "response": {}}}],
                },
            ],
            "does not match the function call name",
        ),
    ],
)
def test_refuses_what_the_real_api_refuses(fake, contents, expected):
    assert expected in refusal(generate(fake, {"contents": contents}))


def test_a_well_formed_call_and_response_pass(fake):
    assert generate(fake, {"contents": [ASK, CALL, ANSWER]}).status_code == 200


def test_input_over_the_window_gets_the_real_wording(fake):
    fake.window = 10
    message = refusal(
        generate(fake, {"contents": [{"role": "user", "parts": [{"text": "x" * 400}]}]})
    )
    assert message.startswith("The input token count (")
    assert message.endswith("exceeds the maximum number of tokens allowed (10).")


def test_cached_content_tokens_follow_the_longest_prefix_seen(fake):
    system = {"parts": [{"text": "Rules. " * 1000}]}  # over the 1024-token minimum
    first = generate(fake, {"systemInstruction": system, "contents": [ASK]}).json()
    later = [ASK, {"role": "model", "parts": [{"text": "ok"}]}, {**ASK, "parts": [{"text": "2"}]}]
    second = generate(fake, {"systemInstruction": system, "contents": later}).json()
    other = generate(fake, {"contents": [ASK]}).json()  # a short prompt: never cached
    assert "cachedContentTokenCount" not in first["usageMetadata"]
    usage = second["usageMetadata"]
    assert 1024 <= usage["cachedContentTokenCount"] < usage["promptTokenCount"]
    assert reply_from_response(second).usage.cache_read_tokens == usage["cachedContentTokenCount"]
    assert "cachedContentTokenCount" not in other["usageMetadata"]


def test_failures_on_demand_carry_the_apis_retry_info(fake):
    fake.fail_next(429)
    error = generate(fake, {"contents": [ASK]}).json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    assert error["details"][0]["@type"].endswith("google.rpc.RetryInfo")
    fake.hang_next(1.0)
    with pytest.raises(httpx.ReadTimeout):
        generate(fake, {"contents": [ASK]}, timeout=0.2)
