"""Chat Completions bodies to and from the transcript (``contextsvc.engine.providers.openai_chat``).

Bodies are the documented Chat Completions shapes (system / developer
messages, content as a string or parts, ``tool_calls`` with JSON-text
arguments, ``tool`` messages, function tools), including what the ``openai``
SDK dumps for a reply it parsed (``null`` fields, ``annotations``).
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion

from contextsvc.engine.messages import PromptSection, ToolDef
from contextsvc.engine.providers import openai_chat
from contextsvc.engine.providers.common import ConversionError, Converted
from sessions.schemas import MessageIn

IMAGE_PART = {
    "type": "image_url",
    "image_url": {"url": "data:image/png;base64,iVBO", "detail": "low"},
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    },
}


def agent_request() -> dict:
    return {
        "model": "gpt-4.1",
        "max_completion_tokens": 1000,
        "stream": True,
        "stream_options": {"include_usage": True},
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "tools": [
            WEATHER,
            {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}},
        ],
        "messages": [
            {"role": "system", "content": "You are a helpful agent."},
            {"role": "developer", "content": "Answer in French."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Weather in Paris and Lyon?"}, IMAGE_PART],
                "name": "ann",
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {
                "role": "tool",
                "tool_call_id": "call_2",
                "content": [{"type": "text", "text": "21C"}],
            },
            {"role": "system", "content": "Context is 80% full."},
            {
                "role": "assistant",
                "content": "Paris 18C, Lyon 21C.",
                "reasoning_content": "Both answered.",
            },
            {"role": "user", "content": "Thanks"},
        ],
    }


def test_agent_request_round_trips():
    body = agent_request()
    back = openai_chat.request_from_transcript(
        openai_chat.request_to_transcript(copy.deepcopy(body))
    )
    assert back == body


def test_every_transcript_message_is_a_valid_message_in():
    for message in openai_chat.request_to_transcript(agent_request()).messages:
        MessageIn.model_validate(message)


def test_leading_instructions_are_sections_and_later_ones_stay_in_place():
    converted = openai_chat.request_to_transcript(agent_request())
    assert converted.sections == [
        PromptSection(name="system.0", content="You are a helpful agent."),
        PromptSection(name="developer.1", content="Answer in French."),
    ]
    assert converted.messages[4] == {"role": "system", "content": "Context is 80% full."}


def test_tool_calls_parse_their_arguments_and_name_their_tool_messages():
    messages = openai_chat.request_to_transcript(agent_request()).messages
    assistant = messages[1]
    assert assistant["content"] == ""  # null content, no meta: nothing to keep
    assert assistant["tool_calls"] == [
        {"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}},
        {"id": "call_2", "name": "get_weather", "arguments": {"city": "Lyon"}},
    ]
    assert [(m["tool_call_id"], m["name"]) for m in messages[2:4]] == [
        ("call_1", "get_weather"),
        ("call_2", "get_weather"),
    ]
    assert messages[5]["reasoning"] == "Both answered."


def test_compact_argument_text_comes_back_as_the_same_json():
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x":1,"y":[]}'}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    [stored] = openai_chat.messages_to_transcript([message])
    assert stored["content"] == ""
    [back] = openai_chat.messages_from_transcript([stored])
    assert back["tool_calls"][0]["function"]["arguments"] == '{"x": 1, "y": []}'


def test_tools_become_tool_defs_with_their_extra_keys():
    converted = openai_chat.request_to_transcript(agent_request())
    assert converted.tools == [
        ToolDef(
            "get_weather",
            "Weather for a city",
            WEATHER["function"]["parameters"],
            category="client",
        ),
        ToolDef("ls", "", {"type": "object"}, category="client"),
    ]
    assert converted.tool_extras == {"get_weather": {"function": {"strict": True}, "tool": {}}}


def test_arguments_that_are_not_a_json_object_are_kept_as_the_rest_api_keeps_them():
    messages = openai_chat.messages_to_transcript(
        [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "a",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{not json"},
                    },
                    {
                        "id": "b",
                        "type": "function",
                        "function": {"name": "f", "arguments": "[1, 2]"},
                    },
                ],
            },
        ]
    )
    calls = messages[1]["tool_calls"]
    assert [c["arguments"] for c in calls] == [{"_raw": "{not json"}, {"_value": [1, 2]}]
    assert (
        openai_chat.messages_from_transcript(messages)[1]["tool_calls"][1]["function"]["arguments"]
        == "[1, 2]"
    )


def test_an_sdk_dump_of_a_reply_drops_nulls_and_keeps_the_rest():
    completion = ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {
                        "role": "assistant",
                        "content": "Hi",
                        "refusal": None,
                        "annotations": [],
                    },
                }
            ],
        }
    )
    dumped = completion.choices[0].message.model_dump()
    [message] = openai_chat.messages_to_transcript([dumped])
    MessageIn.model_validate(message)
    back = openai_chat.messages_from_transcript([message])[0]
    assert back == {k: v for k, v in dumped.items() if v is not None}


def test_empty_content_with_tool_calls_round_trips_and_none_comes_back_as_none():
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    for content in ("", None):
        message = {"role": "assistant", "content": content, "tool_calls": [call]}
        assert openai_chat.messages_from_transcript(
            openai_chat.messages_to_transcript([message])
        ) == [message]


@pytest.mark.parametrize(
    ("message", "path"),
    [
        ({"role": "function", "content": "x", "name": "f"}, "messages.0.role"),
        ({"content": "x"}, "messages.0.role"),
        ({"role": "tool", "content": "x"}, "messages.0.tool_call_id"),
        ({"role": "user", "content": 5}, "messages.0.content"),
        (
            {"role": "assistant", "tool_calls": [{"id": "a", "type": "custom", "custom": {}}]},
            "messages.0.tool_calls.0",
        ),
    ],
)
def test_bodies_the_api_rejects_name_the_field(message, path):
    with pytest.raises(ConversionError) as caught:
        openai_chat.messages_to_transcript([message])
    assert caught.value.path == path


def test_response_gives_the_assistant_message_and_usage_with_cached_tokens_split_off():
    response = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4.1",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "annotations": [],
                    "tool_calls": [
                        {
                            "id": "call_7",
                            "type": "function",
                            "function": {"name": "ls", "arguments": "{}"},
                        }
                    ],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 5000,
            "completion_tokens": 20,
            "total_tokens": 5020,
            "prompt_tokens_details": {"cached_tokens": 4096},
        },
    }
    reply = openai_chat.reply_from_response(response)
    assert reply.message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_7", "name": "ls", "arguments": {}}],
    }
    assert reply.usage.to_dict() == {
        "input_tokens": 904,
        "output_tokens": 20,
        "cache_creation_tokens": 0,
        "cache_read_tokens": 4096,
    }
    assert reply.stop_reason == "tool_calls"
    assert openai_chat.messages_from_transcript([reply.message]) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": response["choices"][0]["message"]["tool_calls"],
        }
    ]


def test_a_refusal_is_a_refusal_part():
    reply = openai_chat.reply_from_response(
        {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't."}}]}
    )
    assert reply.message["content"] == [{"type": "refusal", "refusal": "I can't."}]


def test_transcript_messages_render_as_chat_messages_with_sections_first():
    transcript = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "read", "arguments": {"p": 1}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "data"},
    ]
    body = openai_chat.request_from_transcript(
        Converted(
            messages=transcript, sections=[PromptSection("base", "Be brief.")], rest={"model": "m"}
        )
    )
    assert body == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"p": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "data"},
        ],
    }


# --- property: any well-formed conversation round-trips ------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
PARTS = st.lists(
    st.one_of(st.builds(lambda t: {"type": "text", "text": t}, TEXT), st.just(IMAGE_PART)),
    min_size=1,
    max_size=3,
)
# The service refuses integers past 64 bits in JSON (a 422): agents' arguments stay within.
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ARGS = st.dictionaries(st.text(max_size=5), st.one_of(INT64, TEXT, st.none()), max_size=3)
SPACING = st.sampled_from([None, (",", ":"), (", ", ": ")])


@st.composite
def conversations(draw):
    messages = [{"role": "system", "content": draw(TEXT)}] if draw(st.booleans()) else []
    for turn in range(draw(st.integers(1, 4))):
        user = {"role": "user", "content": draw(st.one_of(TEXT, PARTS))}
        if draw(st.booleans()):
            user["name"] = "ann"
        messages.append(user)
        calls = []
        for k in range(draw(st.integers(0, 2))):
            spacing = draw(SPACING)
            text = json.dumps(draw(ARGS), separators=spacing) if spacing else json.dumps(draw(ARGS))
            calls.append(
                {
                    "id": f"call_{turn}_{k}",
                    "type": "function",
                    "function": {"name": "f", "arguments": text},
                }
            )
        assistant = {
            "role": "assistant",
            "content": draw(st.one_of(TEXT, st.none() if calls else TEXT)),
        }
        if calls:
            assistant["tool_calls"] = calls
        messages.append(assistant)
        for call in calls:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": draw(st.one_of(TEXT, PARTS)),
                }
            )
        if draw(st.booleans()):
            messages.append(
                {"role": draw(st.sampled_from(["system", "developer"])), "content": draw(TEXT)}
            )
    return messages


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_any_well_formed_conversation_round_trips(messages):
    body = {"model": "m", "messages": messages}
    converted = openai_chat.request_to_transcript(copy.deepcopy(body))
    for message in converted.messages:
        MessageIn.model_validate(message)
    assert parsed_arguments(openai_chat.request_from_transcript(converted)) == parsed_arguments(
        body
    )


def parsed_arguments(body: dict) -> dict:
    """``body`` with each call's argument text parsed: spacing is not kept (module doc)."""
    out = copy.deepcopy(body)
    for message in out["messages"]:
        for call in message.get("tool_calls") or ():
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out
