"""SSE parsing and stream accumulation (``contextsvc.engine.providers.sse``).

The streams are the fakes' own (``fakes.streams``: the providers'
documented event sequences), fed split at every byte boundary; what a stream
accumulates equals what the same answer gives non-streamed.
"""

from __future__ import annotations

import json

import pytest

from contextsvc.engine.providers import anthropic, openai_chat
from contextsvc.engine.providers.sse import (
    AnthropicStream,
    OpenAIStream,
    SseEvent,
    SseParser,
)
from fakes.streams import (
    ScriptedReply,
    anthropic_content,
    anthropic_events,
    anthropic_frame,
    openai_chunks,
    openai_frame,
    openai_message,
    tool_call,
)

REPLY = ScriptedReply(
    text="Let me look — ünïcödé and emoji 🚀 too.",
    thinking="The user wants the weather.\nTwo cities.",
    tool_calls=[
        tool_call("get_weather", {"city": "Paris"}),
        tool_call("ls", {"deep": [1, {"x": None}]}),
    ],
)


def anthropic_message() -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": anthropic_content(REPLY, 1),
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 55,
            "cache_creation_input_tokens": 1000,
            "cache_read_input_tokens": 3000,
        },
    }


def openai_completion() -> dict:
    message = openai_message(REPLY, 1)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-fake",
        "system_fingerprint": "fp",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls"}
        ],
        "usage": {
            "prompt_tokens": 5000,
            "completion_tokens": 40,
            "total_tokens": 5040,
            "prompt_tokens_details": {"cached_tokens": 4096},
        },
    }


def parse_all(body: bytes) -> list[SseEvent]:
    """Every event of a whole body."""
    parser = SseParser()
    return [*parser.feed(body), *parser.close()]


def anthropic_body() -> bytes:
    return b"".join(anthropic_frame(e) for e in anthropic_events(anthropic_message()))


def openai_body() -> bytes:
    chunks = openai_chunks(openai_completion(), include_usage=True)
    return b"".join([*(openai_frame(c) for c in chunks), openai_frame("[DONE]")])


# --- the parser ---------------------------------------------------------------------


@pytest.mark.parametrize("body", [anthropic_body(), openai_body()], ids=["anthropic", "openai"])
def test_split_at_every_byte_boundary_gives_the_same_events(body):
    whole = parse_all(body)
    assert len(whole) > 10
    for cut in range(1, len(body)):
        parser = SseParser()
        events = parser.feed(body[:cut]) + parser.feed(body[cut:]) + parser.close()
        assert events == whole, cut


def test_one_byte_at_a_time_with_crlf_line_ends():
    body = anthropic_body().replace(b"\n", b"\r\n")
    parser = SseParser()
    events = [e for i in range(len(body)) for e in parser.feed(body[i : i + 1])]
    assert events == parse_all(anthropic_body())


def test_comments_multi_line_data_fields_and_line_ends():
    body = (
        b"\xef\xbb\xbf: a comment\n"
        b"event: first\r\ndata: line one\rdata:line two\n\n"
        b"id: 7\nretry: 1500\ndata: {}\n\n"
        b"event: no data\n\n"
        b"data\n\n"
        b"data:  two spaces\n\n"
        b"data: never ended"
    )
    assert parse_all(body) == [
        SseEvent(event="first", data="line one\nline two"),
        SseEvent(data="{}", id="7", retry=1500),
        SseEvent(data="", id="7", retry=1500),
        SseEvent(data=" two spaces", id="7", retry=1500),
    ]


def test_a_final_cr_completes_the_last_line_at_close():
    parser = SseParser()
    assert parser.feed(b"data: x\n\r") == []
    assert parser.close() == [SseEvent(data="x")]


# --- accumulators -----------------------------------------------------------------


def test_anthropic_stream_equals_the_non_streamed_response():
    stream = AnthropicStream()
    for event in parse_all(anthropic_body()):
        stream.feed(event)
    assert stream.done
    reply = stream.result()
    expected = anthropic.reply_from_response(anthropic_message())
    assert reply == expected
    assert (
        reply.message["content"][0]["signature"] == anthropic_message()["content"][0]["signature"]
    )
    assert reply.usage.cache_read_tokens == 3000


def test_openai_stream_equals_the_non_streamed_response():
    stream = OpenAIStream()
    for event in parse_all(openai_body()):
        stream.feed(event)
    assert stream.done
    assert stream.result() == openai_chat.reply_from_response(openai_completion())
    assert stream.result().usage.to_dict()["input_tokens"] == 904


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_stream_cut_anywhere_keeps_the_text_that_arrived_and_no_partial_call(provider):
    body = anthropic_body() if provider == "anthropic" else openai_body()
    events = parse_all(body)
    full = (AnthropicStream if provider == "anthropic" else OpenAIStream)()
    for event in events:
        full.feed(event)
    complete = full.result()
    for n in range(len(events)):
        stream = (AnthropicStream if provider == "anthropic" else OpenAIStream)()
        for event in events[:n]:
            stream.feed(event)
        reply = stream.result()
        assert reply.incomplete is (n < len(events))
        text = (
            "".join(p.get("text", "") for p in reply.message["content"] if isinstance(p, dict))
            if isinstance(reply.message["content"], list)
            else reply.message["content"]
        )
        assert REPLY.text.startswith(text)
        for call in reply.message.get("tool_calls", ()):
            assert call in complete.message["tool_calls"]
            assert "_raw" not in call["arguments"]


def test_anthropic_stream_reports_an_error_event():
    stream = AnthropicStream()
    stream.feed(
        SseEvent(
            event="message_start",
            data=json.dumps(
                {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}}
            ),
        )
    )
    stream.feed(
        SseEvent(
            event="error",
            data=json.dumps(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            ),
        )
    )
    reply = stream.result()
    assert reply.error == {"type": "overloaded_error", "message": "Overloaded"}
    assert reply.incomplete and reply.usage.input_tokens == 3


def test_openai_stream_of_a_server_that_repeats_ids_and_sends_null_choices():
    # vLLM-style: the id and name in every piece, a usage chunk with "choices": null.
    chunks = [
        {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "t1", "function": {"name": "f", "arguments": '{"a"'}}
                        ]
                    },
                }
            ],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "t1", "function": {"name": "f", "arguments": ": 1}"}}
                        ]
                    },
                }
            ],
        },
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"id": "c", "choices": None, "usage": {"prompt_tokens": 9, "completion_tokens": 2}},
    ]
    stream = OpenAIStream()
    for event in parse_all(b"".join([*(openai_frame(c) for c in chunks), openai_frame("[DONE]")])):
        stream.feed(event)
    reply = stream.result()
    assert reply.message["tool_calls"] == [{"id": "t1", "name": "f", "arguments": {"a": 1}}]
    assert reply.usage.input_tokens == 9 and not reply.incomplete
