"""Gemini bodies to and from the transcript: requests, id-less calls, replies, the SSE stream."""

from __future__ import annotations

import copy
import json

import pytest

from contextsvc.engine.providers import gemini, native
from contextsvc.engine.providers.common import ConversionError, take_meta
from contextsvc.engine.providers.gemini_contents import contents_from_transcript
from contextsvc.engine.providers.gemini_stream import (
    GeminiStream,
    reply_from_response,
    usage_from_gemini,
)
from contextsvc.engine.providers.sse import SseParser

SHELL = "run_shell_command"


def gemini_cli_body() -> dict:
    """A request shaped as Gemini CLI sends it: thoughts, signatures, id-less calls."""
    return {
        "contents": [
            {"role": "user", "parts": [{"text": "List the files, then count them."}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Planning.", "thought": True, "thoughtSignature": "c2ln"},
                    {
                        "functionCall": {"name": SHELL, "args": {"command": "ls"}},
                        "thoughtSignature": "c2",
                    },
                ],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": SHELL, "response": {"output": "a\nb"}}}],
            },
            {
                "role": "model",
                "parts": [
                    {"text": "Two files. Checking both."},
                    {"functionCall": {"name": "read_file", "args": {"path": "a"}, "id": "r1"}},
                    {"functionCall": {"name": SHELL, "args": {"command": "ls"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "read_file",
                            "id": "r1",
                            "response": {"error": "gone"},
                        }
                    },
                    {"functionResponse": {"name": SHELL, "response": {"output": "a", "exit": 0}}},
                    {"text": "Also: be brief."},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                ],
            },
        ],
        "systemInstruction": {"parts": [{"text": "You are a CLI agent."}, {"text": "Be safe."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": SHELL,
                        "description": "Run",
                        "parametersJsonSchema": {"type": "object"},
                    },
                    {"name": "read_file", "parameters": {"type": "OBJECT"}, "behavior": "BLOCKING"},
                ]
            },
            {"googleSearch": {}},
        ],
        "generationConfig": {"temperature": 0, "thinkingConfig": {"includeThoughts": True}},
    }


def test_request_round_trips_through_the_transcript():
    body = gemini_cli_body()
    converted = gemini.request_to_transcript(copy.deepcopy(body))
    assert gemini.request_from_transcript(converted) == body


def test_request_parts_become_transcript_fields():
    converted = gemini.request_to_transcript(gemini_cli_body())
    roles = [m["role"] for m in converted.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "tool", "user"]
    assert [s.content for s in converted.sections] == ["You are a CLI agent.", "Be safe."]
    assert [t.name for t in converted.tools] == [SHELL, "read_file"]
    assert converted.other_tools == [{"googleSearch": {}}]
    assert converted.rest == {"generationConfig": gemini_cli_body()["generationConfig"]}
    first_call = converted.messages[1]
    assert first_call["reasoning"] == "Planning."
    assert first_call["tool_calls"][0]["arguments"] == {"command": "ls"}
    error = converted.messages[4]
    assert error["tool_call_id"] == "r1"
    assert take_meta(error["content"]) == ("gone", {"is_error": True})
    image = converted.messages[6]["content"][1]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }


def test_id_less_calls_get_stable_ids_and_results_pair_by_name_in_order():
    messages = gemini.request_to_transcript(gemini_cli_body()).messages
    first = messages[1]["tool_calls"][0]["id"]
    second = messages[3]["tool_calls"][1]["id"]
    assert messages[2]["tool_call_id"] == first
    assert messages[5]["tool_call_id"] == second
    # The same call again, once the first was answered: the same id (stable, reused).
    assert first == second
    assert first.startswith("gemini_")


def test_two_identical_open_calls_get_distinct_ids_paired_in_order():
    call = {"functionCall": {"name": SHELL, "args": {"command": "date"}}}
    contents = [
        {"role": "user", "parts": [{"text": "twice"}]},
        {"role": "model", "parts": [call, call]},
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": SHELL, "response": {"output": "one"}}},
                {"functionResponse": {"name": SHELL, "response": {"output": "two"}}},
            ],
        },
    ]
    messages = gemini.contents_to_transcript(contents)
    ids = [c["id"] for c in messages[1]["tool_calls"]]
    assert len(set(ids)) == 2 and ids[1] == ids[0] + "_2"
    assert [m["tool_call_id"] for m in messages[2:]] == ids
    assert contents_from_transcript(messages) == contents


def test_a_reply_and_the_next_request_make_the_same_id():
    response = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"name": SHELL, "args": {"command": "ls"}}}],
                },
                "finishReason": "STOP",
            }
        ]
    }
    reply = reply_from_response(response)
    request = gemini.request_to_transcript(gemini_cli_body())
    assert reply.message["tool_calls"][0]["id"] == request.messages[1]["tool_calls"][0]["id"]


def test_a_response_with_the_clients_own_id_answers_the_id_less_call():
    # Gemini CLI makes up an id for a call the API sent without one, on its response only.
    contents = [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": SHELL, "args": {}}}]},
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "cli-1", "name": SHELL, "response": {"output": "ok"}}}
            ],
        },
    ]
    messages = gemini.contents_to_transcript(copy.deepcopy(contents))
    assert messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]
    assert contents_from_transcript(messages) == contents


def test_an_id_less_response_pairs_with_a_call_appended_before():
    call_id = "gemini_abc"
    contents = [{"role": "user", "parts": [{"functionResponse": {"name": SHELL, "response": {}}}]}]
    converted, starts = native.to_transcript("gemini", contents, open_calls=[(call_id, SHELL)])
    assert converted[0]["tool_call_id"] == call_id and starts == [0]


def test_wrong_roles_and_shapes_are_conversion_errors():
    with pytest.raises(ConversionError, match="valid role"):
        gemini.contents_to_transcript([{"role": "system", "parts": [{"text": "x"}]}])
    with pytest.raises(ConversionError):
        gemini.request_to_transcript({"contents": "x"})
    with pytest.raises(native.NativeFormatError) as info:
        native.to_transcript(
            "gemini", [{"role": "user", "parts": [{"text": "x"}]}, {"role": "tool", "parts": []}]
        )
    assert info.value.path == "messages.1.role"


def test_usage_splits_cached_prompt_and_counts_thoughts_as_output():
    usage = usage_from_gemini(
        {
            "promptTokenCount": 1000,
            "cachedContentTokenCount": 800,
            "candidatesTokenCount": 50,
            "thoughtsTokenCount": 30,
            "totalTokenCount": 1080,
        }
    )
    assert usage.to_dict() == {
        "input_tokens": 200,
        "output_tokens": 80,
        "cache_creation_tokens": 0,
        "cache_read_tokens": 800,
    }
    assert usage_from_gemini(None).input_tokens == 0


def test_reply_from_a_response_and_a_blocked_prompt():
    reply = reply_from_response(
        {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": "Hi."}]}, "finishReason": "STOP"}
            ],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2},
            "modelVersion": "gemini-2.5-pro",
            "responseId": "r-1",
        }
    )
    assert reply.message == {"role": "assistant", "content": [{"type": "text", "text": "Hi."}]}
    assert (reply.stop_reason, reply.id, reply.model) == ("STOP", "r-1", "gemini-2.5-pro")
    assert reply.usage.output_tokens == 2
    blocked = reply_from_response({"promptFeedback": {"blockReason": "SAFETY"}})
    assert blocked.stop_reason == "SAFETY" and blocked.message["content"] == []


# A stream as streamGenerateContent?alt=sse sends it: pieces of text, a thought,
# a call whole in one chunk, finishReason and the final usage in the last chunk.
RECORDED = [
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "Think", "thought": True}]}}]},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "ing.", "thought": True}]}}]},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "I will "}]}}]},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "list them."}]}}]},
    {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {"name": SHELL, "args": {"command": "ls"}},
                            "thoughtSignature": "s",
                        }
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 120,
            "cachedContentTokenCount": 100,
            "candidatesTokenCount": 9,
            "thoughtsTokenCount": 4,
        },
        "modelVersion": "gemini-2.5-flash",
        "responseId": "resp-7",
    },
]


def sse_bytes(chunks: list[dict]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks)


def test_stream_accumulates_text_thoughts_calls_and_the_last_usage():
    parser, stream = SseParser(), GeminiStream()
    raw = sse_bytes(RECORDED)
    for at in range(0, len(raw), 13):  # split anywhere
        for event in parser.feed(raw[at : at + 13]):
            stream.feed(event)
    reply = stream.result()
    assert not reply.incomplete and reply.stop_reason == "STOP"
    message = reply.message
    content, meta = take_meta(message["content"])
    assert content == [{"type": "text", "text": "I will list them."}]
    assert message["reasoning"] == "Thinking."
    assert meta["gemini_thoughts"] == [{"text": "Thinking.", "thought": True}]
    call = message["tool_calls"][0]
    assert (call["name"], call["arguments"]) == (SHELL, {"command": "ls"})
    assert meta["gemini_calls"][call["id"]] == {"made": True, "part": {"thoughtSignature": "s"}}
    assert reply.usage.to_dict() == {
        "input_tokens": 20,
        "output_tokens": 13,
        "cache_creation_tokens": 0,
        "cache_read_tokens": 100,
    }
    assert (reply.id, reply.model) == ("resp-7", "gemini-2.5-flash")
    # Sent back in the next request, the turn is what the model said.
    turn = contents_from_transcript([message])[0]
    assert turn["parts"][-1] == {
        "functionCall": {"name": SHELL, "args": {"command": "ls"}},
        "thoughtSignature": "s",
    }


def test_a_cut_stream_is_incomplete_and_keeps_what_arrived():
    stream = GeminiStream()
    for chunk in RECORDED[:3]:
        stream.feed(chunk)
    reply = stream.result()
    assert reply.incomplete and reply.stop_reason is None
    assert take_meta(reply.message["content"])[0] == [{"type": "text", "text": "I will "}]


def test_a_stream_error_is_kept():
    stream = GeminiStream()
    stream.feed({"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}})
    assert stream.result().error == {
        "code": 429,
        "message": "quota",
        "status": "RESOURCE_EXHAUSTED",
    }
