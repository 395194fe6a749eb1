"""The fake upstreams speak the protocols the official SDKs parse, and the converters read them.

The ``anthropic`` and ``openai`` SDKs are pointed at ``fakes`` servers
(``base_url``), streaming and not; the raw streams are also read with httpx
in uneven chunks through ``engine.providers.sse``, and the bodies the SDKs
send in an agent loop go through the converters and back unchanged.
"""

from __future__ import annotations

import random

import anthropic
import httpx
import openai
import pytest

from contextsvc.engine.providers import anthropic as anthropic_format
from contextsvc.engine.providers import openai_chat
from contextsvc.engine.providers.sse import AnthropicStream, OpenAIStream, SseParser
from fakes.anthropic_server import FakeAnthropic
from fakes.openai_server import FakeOpenAI
from fakes.streams import ScriptedReply, tool_call
from sessions.schemas import MessageIn

TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]
FUNCTIONS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
]
CALL_REPLY = ScriptedReply(
    text="Reading both.",
    tool_calls=[
        tool_call("read_file", {"path": "a.py"}, id="call_a"),
        tool_call("read_file", {"path": "b.py"}, id="call_b"),
    ],
)


@pytest.fixture
def fake_anthropic():
    with FakeAnthropic(api_key="test-key") as fake:
        yield fake


@pytest.fixture
def fake_openai():
    with FakeOpenAI(api_key="test-key") as fake:
        yield fake


@pytest.fixture
def claude(fake_anthropic):
    return anthropic.Anthropic(base_url=fake_anthropic.base_url, api_key="test-key", max_retries=2)


@pytest.fixture
def gpt(fake_openai):
    return openai.OpenAI(base_url=f"{fake_openai.base_url}/v1", api_key="test-key", max_retries=2)


def feed_raw(url: str, body: dict, headers: dict, stream) -> None:
    """POST ``body`` and feed its SSE body to ``stream`` in random-sized chunks."""
    parser = SseParser()
    rng = random.Random(7)
    with httpx.stream("POST", url, json=body, headers=headers, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        buffer = b""
        try:
            for chunk in response.iter_raw():
                buffer += chunk
                while buffer:
                    size = rng.randint(1, 40)
                    for event in parser.feed(buffer[:size]):
                        stream.feed(event)
                    buffer = buffer[size:]
        except httpx.RemoteProtocolError:
            pass  # a cut stream: what arrived has been fed
    for event in parser.close():
        stream.feed(event)


# --- anthropic ----------------------------------------------------------------------

ANTHROPIC_HEADERS = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}


def test_anthropic_sdk_streams_text_thinking_and_tool_use(fake_anthropic, claude):
    fake_anthropic.script(ScriptedReply(**vars(CALL_REPLY) | {"thinking": "Two files."}))
    with claude.messages.stream(
        model="claude-fake-large",
        max_tokens=500,
        tools=TOOLS,
        messages=[{"role": "user", "content": "Read a and b"}],
    ) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == "Reading both."
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert final.content[0].signature
    assert final.content[3].input == {"path": "b.py"}
    assert final.stop_reason == "tool_use"
    assert final.usage.input_tokens > 0 and final.usage.cache_read_input_tokens == 0


def test_anthropic_raw_stream_accumulates_to_the_non_streamed_answer(fake_anthropic):
    body = {
        "model": "claude-fake-large",
        "max_tokens": 500,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "go"}],
    }
    fake_anthropic.script(CALL_REPLY, CALL_REPLY)
    stream = AnthropicStream()
    feed_raw(
        f"{fake_anthropic.base_url}/v1/messages",
        {**body, "stream": True},
        ANTHROPIC_HEADERS,
        stream,
    )
    plain = httpx.post(
        f"{fake_anthropic.base_url}/v1/messages", json=body, headers=ANTHROPIC_HEADERS
    ).json()
    expected = anthropic_format.reply_from_response(plain)
    reply = stream.result()
    assert not reply.incomplete
    assert reply.message == expected.message
    assert reply.usage.output_tokens == expected.usage.output_tokens
    MessageIn.model_validate(reply.message)


def test_anthropic_stream_cut_mid_way_is_incomplete_without_partial_calls(fake_anthropic, claude):
    fake_anthropic.script(CALL_REPLY, CALL_REPLY)
    fake_anthropic.cut_stream_after = 9
    body = {
        "model": "claude-fake-large",
        "max_tokens": 500,
        "tools": TOOLS,
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    stream = AnthropicStream()
    feed_raw(f"{fake_anthropic.base_url}/v1/messages", body, ANTHROPIC_HEADERS, stream)
    reply = stream.result()
    assert reply.incomplete and not stream.done
    assert reply.message["content"] == [{"type": "text", "text": "Reading both."}]
    assert [c["arguments"] for c in reply.message.get("tool_calls", ())] in ([], [{"path": "a.py"}])
    # The SDK sees the cut too (its transport is its own httpx build: compare by name).
    with pytest.raises(Exception) as cut:  # noqa: B017 - checked just below
        with claude.messages.stream(
            model="claude-fake-large", max_tokens=50, tools=TOOLS, messages=body["messages"]
        ) as sdk:
            sdk.get_final_message()
    assert isinstance(cut.value, anthropic.APIConnectionError) or (
        type(cut.value).__name__ == "RemoteProtocolError"
    )


def test_anthropic_sdk_agent_loop_bodies_round_trip_through_the_transcript(fake_anthropic, claude):
    fake_anthropic.script(
        ScriptedReply(
            text="Reading.", thinking="Plan.", tool_calls=[tool_call("read_file", {"path": "a.py"})]
        ),
        CALL_REPLY,
        ScriptedReply(text="Done."),
    )
    system = [{"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}]
    messages: list = [{"role": "user", "content": "Fix the bug"}]
    for _ in range(3):
        response = claude.messages.create(
            model="claude-fake-large", max_tokens=500, system=system, tools=TOOLS, messages=messages
        )
        messages.append({"role": "assistant", "content": response.content})
        uses = [b for b in response.content if b.type == "tool_use"]
        if uses:
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": u.id,
                            "content": f"contents of {u.input['path']}",
                        }
                        for u in uses
                    ],
                }
            )
    sent = fake_anthropic.messages_requests()[-1].body
    converted = anthropic_format.request_to_transcript(sent)
    assert [m["role"] for m in converted.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
    ]
    for message in converted.messages:
        MessageIn.model_validate(message)
    back = anthropic_format.request_from_transcript(converted)
    assert back == {**sent, "system": [{"type": "text", "text": "You are an agent."}]}
    # The reply of each call is what the client sends back next time.
    reply = anthropic_format.reply_from_response(response.model_dump(exclude_none=True))
    assert reply.message == {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}


def test_anthropic_count_tokens_models_and_prompt_cache(fake_anthropic, claude):
    count = claude.messages.count_tokens(
        model="claude-fake-large", messages=[{"role": "user", "content": "hi"}]
    )
    assert count.input_tokens > 0
    assert [m.id for m in claude.models.list()] == ["claude-fake-large", "claude-fake-small"]
    system = [
        {"type": "text", "text": "Stable rules. " * 400, "cache_control": {"type": "ephemeral"}}
    ]
    first = claude.messages.create(
        model="claude-fake-large",
        max_tokens=50,
        system=system,
        messages=[{"role": "user", "content": "a"}],
    )
    second = claude.messages.create(
        model="claude-fake-large",
        max_tokens=50,
        system=system,
        messages=[{"role": "user", "content": "b"}],
    )
    assert (
        first.usage.cache_creation_input_tokens > 1000 and first.usage.cache_read_input_tokens == 0
    )
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0


def test_anthropic_rejections_have_the_real_shapes(fake_anthropic, claude):
    fake_anthropic.window = 50
    with pytest.raises(anthropic.BadRequestError) as too_long:
        claude.messages.create(
            model="claude-fake-large",
            max_tokens=50,
            messages=[{"role": "user", "content": "word " * 400}],
        )
    assert too_long.value.body["error"]["type"] == "invalid_request_error"
    assert too_long.value.body["error"]["message"].startswith("prompt is too long: ")
    assert too_long.value.body["error"]["message"].endswith(" tokens > 50 maximum")
    fake_anthropic.window = None
    dangling = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}],
        },
        {"role": "user", "content": "and?"},
    ]
    with pytest.raises(anthropic.BadRequestError, match="without `tool_result`"):
        claude.messages.create(
            model="claude-fake-large", max_tokens=50, tools=TOOLS, messages=dangling
        )
    fake_anthropic.fail_next(429)
    ok = claude.messages.create(
        model="claude-fake-large", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    assert ok.content[0].text
    bad_key = anthropic.Anthropic(base_url=fake_anthropic.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad_key.messages.create(
            model="claude-fake-large", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )


# --- openai -------------------------------------------------------------------------

OPENAI_HEADERS = {"authorization": "Bearer test-key"}


def test_openai_sdk_streams_text_and_tool_calls_with_usage(fake_openai, gpt):
    fake_openai.script(CALL_REPLY)
    chunks = list(
        gpt.chat.completions.create(
            model="gpt-fake-large",
            messages=[{"role": "user", "content": "Read a and b"}],
            tools=FUNCTIONS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens > 0
    fake_openai.script(CALL_REPLY)
    with gpt.chat.completions.stream(
        model="gpt-fake-large",
        messages=[{"role": "user", "content": "Read a and b"}],
        tools=FUNCTIONS,
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Reading both."
    assert [c.function.arguments for c in message.tool_calls] == [
        '{"path": "a.py"}',
        '{"path": "b.py"}',
    ]
    assert final.choices[0].finish_reason == "tool_calls"


def test_openai_raw_stream_accumulates_to_the_non_streamed_answer(fake_openai):
    body = {
        "model": "gpt-fake-large",
        "tools": FUNCTIONS,
        "messages": [{"role": "user", "content": "go"}],
    }
    fake_openai.script(CALL_REPLY, CALL_REPLY)
    stream = OpenAIStream()
    url = f"{fake_openai.base_url}/v1/chat/completions"
    feed_raw(
        url,
        {**body, "stream": True, "stream_options": {"include_usage": True}},
        OPENAI_HEADERS,
        stream,
    )
    expected = openai_chat.reply_from_response(
        httpx.post(url, json=body, headers=OPENAI_HEADERS).json()
    )
    reply = stream.result()
    assert stream.done and not reply.incomplete
    assert reply.message == expected.message
    assert reply.usage.output_tokens == expected.usage.output_tokens
    MessageIn.model_validate(reply.message)


def test_openai_sdk_agent_loop_bodies_round_trip_through_the_transcript(fake_openai, gpt):
    fake_openai.script(CALL_REPLY, ScriptedReply(text="Done."))
    messages: list = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix it"},
    ]
    for _ in range(2):
        response = gpt.chat.completions.create(
            model="gpt-fake-large", messages=messages, tools=FUNCTIONS
        )
        message = response.choices[0].message
        messages.append(message)  # the SDK serialises its own reply object
        for call in message.tool_calls or ():
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": f"ran {call.function.arguments}",
                }
            )
    sent = fake_openai.chat_requests()[-1].body
    converted = openai_chat.request_to_transcript(sent)
    assert [m["role"] for m in converted.messages] == ["user", "assistant", "tool", "tool"]
    for item in converted.messages:
        MessageIn.model_validate(item)
    assert openai_chat.request_from_transcript(converted) == _without_none(sent)
    reply = openai_chat.reply_from_response(response.model_dump())
    assert reply.message == {"role": "assistant", "content": "Done."}


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def test_openai_errors_have_the_real_shape_and_the_sdk_raises_its_own_exceptions(fake_openai, gpt):
    assert [m.id for m in gpt.models.list()] == ["gpt-fake-large", "gpt-fake-small"]
    fake_openai.window = 20
    with pytest.raises(openai.BadRequestError) as too_long:
        gpt.chat.completions.create(
            model="gpt-fake-large", messages=[{"role": "user", "content": "word " * 200}]
        )
    assert too_long.value.code == "context_length_exceeded"
    assert set(too_long.value.body) == {"message", "type", "param", "code"}
    fake_openai.window = None
    unanswered = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "and?"},
    ]
    with pytest.raises(openai.BadRequestError, match="did not have response messages: c1"):
        gpt.chat.completions.create(model="gpt-fake-large", messages=unanswered)
    fake_openai.fail_next(429)
    fake_openai.fail_next(500)
    ok = gpt.chat.completions.create(
        model="gpt-fake-large", messages=[{"role": "user", "content": "hi"}]
    )
    assert ok.choices[0].message.content == "Fake reply to: hi"
    fake_openai.fail_next(429, count=3)
    with pytest.raises(openai.RateLimitError):
        gpt.chat.completions.create(
            model="gpt-fake-large", messages=[{"role": "user", "content": "hi"}]
        )
    fake_openai.hang_next(1.0)
    with pytest.raises(openai.APITimeoutError):
        gpt.with_options(timeout=0.2, max_retries=0).chat.completions.create(
            model="gpt-fake-large", messages=[{"role": "user", "content": "hi"}]
        )
    wrong = openai.OpenAI(base_url=f"{fake_openai.base_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as denied:
        wrong.chat.completions.create(
            model="gpt-fake-large", messages=[{"role": "user", "content": "hi"}]
        )
    assert denied.value.code == "invalid_api_key"


def test_openai_cached_tokens_follow_the_longest_prefix_seen(fake_openai, gpt):
    history = [
        {"role": "system", "content": "Rules. " * 1000},
        {"role": "user", "content": "first"},
    ]
    first = gpt.chat.completions.create(model="gpt-fake-large", messages=history)
    second = gpt.chat.completions.create(
        model="gpt-fake-large",
        messages=[
            *history,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
        ],
    )
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert 1024 <= second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens
