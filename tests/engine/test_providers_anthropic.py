"""Anthropic Messages bodies to and from the transcript (``contextsvc.engine.providers.anthropic``).

Bodies are the documented Messages shapes: system as a string or text blocks
with ``cache_control``, content blocks text / image / document / tool_use /
tool_result (string or blocks, ``is_error``) / thinking with its signature /
redacted_thinking / server tool blocks, client and server tools.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.messages import PromptSection, ToolDef
from contextsvc.engine.providers import anthropic
from contextsvc.engine.providers.common import META, ConversionError
from sessions.schemas import MessageIn

IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
}
THINKING = {"type": "thinking", "thinking": "The user wants the file.", "signature": "EqQBCgIYAhIM"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"}
READ_TOOL = {
    "name": "read_file",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}


def agent_request() -> dict:
    """A coding agent's request after two tool rounds (every block kind the transcript keeps)."""
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 4096,
        "stream": True,
        "temperature": 0.2,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "tool_choice": {"type": "auto"},
        "metadata": {"user_id": "u-1"},
        "system": [
            {"type": "text", "text": "You are a coding agent."},
            {"type": "text", "text": "Rules: be brief.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Today is Tuesday."},
        ],
        "tools": [
            {**READ_TOOL, "cache_control": {"type": "ephemeral"}},
            {"name": "ls", "input_schema": {"type": "object"}, "strict": True},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        ],
        "messages": [
            {"role": "user", "content": "Fix the bug in app.py"},
            {
                "role": "assistant",
                "content": [
                    THINKING,
                    {"type": "text", "text": "Let me read both files."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "read_file",
                        "input": {"path": "app.py"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_02",
                        "name": "read_file",
                        "input": {"path": "b.py"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "print('hi')\n"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02",
                        "content": "No such file",
                        "is_error": True,
                    },
                    {"type": "text", "text": "Also look at this screenshot:"},
                    IMAGE,
                ],
            },
            {
                "role": "assistant",
                "content": [
                    REDACTED,
                    {"type": "tool_use", "id": "toolu_03", "name": "ls", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_03",
                        "content": [{"type": "text", "text": "app.py"}, IMAGE],
                    }
                ],
            },
            {"role": "system", "content": "The user is waiting."},
            {"role": "assistant", "content": "Found it"},
        ],
    }


def without_cache_control(value):
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def test_agent_request_round_trips_apart_from_cache_markers():
    body = agent_request()
    back = anthropic.request_from_transcript(anthropic.request_to_transcript(copy.deepcopy(body)))
    assert back == without_cache_control(body)


def test_every_transcript_message_is_a_valid_message_in():
    for message in anthropic.request_to_transcript(agent_request()).messages:
        MessageIn.model_validate(message)


def test_tool_results_become_one_tool_message_each_in_order_named_after_their_call():
    messages = anthropic.request_to_transcript(agent_request()).messages
    assert [m["role"] for m in messages] == [
        "user", "assistant", "tool", "tool", "user", "assistant", "tool", "system", "assistant",
    ]  # fmt: skip
    first, second = messages[2], messages[3]
    assert (first["tool_call_id"], first["name"], first["content"]) == (
        "toolu_01",
        "read_file",
        "print('hi')\n",
    )
    assert second["tool_call_id"] == "toolu_02"
    assert second["content"][0]["text"] == "No such file"
    assert second["content"][0][META] == {"is_error": True, "string": True}
    assert messages[4]["content"] == [
        {"type": "text", "text": "Also look at this screenshot:"},
        IMAGE,
    ]


def test_assistant_blocks_keep_thinking_and_signature_and_calls_become_tool_calls():
    messages = anthropic.request_to_transcript(agent_request()).messages
    assistant = messages[1]
    assert assistant["content"] == [THINKING, {"type": "text", "text": "Let me read both files."}]
    assert assistant["tool_calls"] == [
        {"id": "toolu_01", "name": "read_file", "arguments": {"path": "app.py"}},
        {"id": "toolu_02", "name": "read_file", "arguments": {"path": "b.py"}},
    ]
    assert messages[5]["content"] == [REDACTED]


def test_a_system_message_inside_messages_stays_in_place_as_a_system_message():
    messages = anthropic.request_to_transcript(agent_request()).messages
    assert messages[7] == {"role": "system", "content": "The user is waiting."}


def test_system_blocks_are_sections_cacheable_up_to_the_last_marker():
    converted = anthropic.request_to_transcript(agent_request())
    assert converted.sections == [
        PromptSection(name="system.0", content="You are a coding agent.", cacheable=True),
        PromptSection(name="system.1", content="Rules: be brief.", cacheable=True),
        PromptSection(name="system.2", content="Today is Tuesday.", cacheable=False),
    ]


@pytest.mark.parametrize(
    ("system", "sections"),
    [
        (None, []),
        ("Be brief.", [PromptSection(name="system", content="Be brief.")]),
        (
            [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            [
                PromptSection(name="system.0", content="a"),
                PromptSection(name="system.1", content="b"),
            ],
        ),
    ],
)
def test_system_string_or_blocks(system, sections):
    assert anthropic.system_to_sections(system) == sections
    assert anthropic.sections_to_system(sections) == system


def test_tools_split_into_client_tools_server_tools_and_extras():
    converted = anthropic.request_to_transcript(agent_request())
    assert converted.tools == [
        ToolDef("read_file", "Read a file", READ_TOOL["input_schema"], category="client"),
        ToolDef("ls", "", {"type": "object"}, category="client"),
    ]
    assert converted.other_tools == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    ]
    assert converted.tool_extras == {"ls": {"strict": True}}


def test_everything_else_passes_through():
    rest = anthropic.request_to_transcript(agent_request()).rest
    assert set(rest) == {
        "model",
        "max_tokens",
        "stream",
        "temperature",
        "thinking",
        "tool_choice",
        "metadata",
    }


def test_a_tool_result_after_other_content_is_refused_as_the_api_does():
    body = {
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "here"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                ],
            },
        ]
    }
    with pytest.raises(ConversionError) as caught:
        anthropic.request_to_transcript(body)
    assert caught.value.path == "messages.2.content.1"


@pytest.mark.parametrize(
    ("message", "path"),
    [
        ({"role": "robot", "content": "x"}, "messages.0.role"),
        ({"role": "user"}, "messages.0.content"),
        ({"role": "user", "content": [{"text": "no type"}]}, "messages.0.content.0"),
        (
            {
                "role": "user",
                "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}],
            },
            "messages.0.content.0",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
            "messages.0.content.0",
        ),
    ],
)
def test_bodies_the_api_rejects_name_the_field(message, path):
    with pytest.raises(ConversionError) as caught:
        anthropic.messages_to_transcript([message])
    assert caught.value.path == path


def test_transcript_posted_through_the_rest_api_renders_as_anthropic_messages():
    # A transcript the REST API stored (no meta): string content with tool calls,
    # results then a plain user message, reasoning without a signature.
    transcript = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Reading.",
            "reasoning": "no signature",
            "tool_calls": [{"id": "c1", "name": "read", "arguments": {"p": 1}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "data"},
        {"role": "user", "content": "thanks"},
    ]
    assert anthropic.messages_from_transcript(transcript) == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "c1", "name": "read", "input": {"p": 1}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "data"}],
        },
        {"role": "user", "content": "thanks"},
    ]


def test_response_gives_the_assistant_message_and_usage_with_cache_figures():
    response = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [
            THINKING,
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "x"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 12,
            "output_tokens": 30,
            "cache_creation_input_tokens": 2048,
            "cache_read_input_tokens": 4096,
        },
    }
    reply = anthropic.reply_from_response(response)
    assert reply.message == {
        "role": "assistant",
        "content": [THINKING, {"type": "text", "text": "Reading it."}],
        "tool_calls": [{"id": "toolu_9", "name": "read_file", "arguments": {"path": "x"}}],
    }
    assert reply.usage.to_dict() == {
        "input_tokens": 12,
        "output_tokens": 30,
        "cache_creation_tokens": 2048,
        "cache_read_tokens": 4096,
    }
    assert (reply.stop_reason, reply.id, reply.model) == ("tool_use", "msg_01", "claude-sonnet-4-6")
    MessageIn.model_validate(reply.message)


# --- property: any well-formed conversation round-trips ------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
TEXT_BLOCK = st.builds(lambda t: {"type": "text", "text": t}, TEXT)
USER_BLOCK = st.one_of(TEXT_BLOCK, st.just(IMAGE))
ASSISTANT_BLOCK = st.one_of(TEXT_BLOCK, st.just(THINKING), st.just(REDACTED))
# The service refuses integers past 64 bits in JSON (a 422): agents' arguments stay within.
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ARGS = st.dictionaries(st.text(max_size=5), st.one_of(INT64, TEXT, st.none()), max_size=3)


@st.composite
def conversations(draw):
    messages = []
    for turn in range(draw(st.integers(1, 5))):
        pending = (
            messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else []
        )
        results = [
            {
                "type": "tool_result",
                "tool_use_id": b["id"],
                **draw(st.sampled_from([{}, {"is_error": True}])),
                **draw(
                    st.one_of(
                        st.builds(lambda t: {"content": t}, TEXT),
                        st.builds(
                            lambda bs: {"content": bs}, st.lists(USER_BLOCK, min_size=1, max_size=2)
                        ),
                    )
                ),
            }
            for b in (pending if isinstance(pending, list) else [])
            if b["type"] == "tool_use"
        ]
        user = draw(st.one_of(TEXT, st.lists(USER_BLOCK, min_size=1, max_size=3)))
        if results:
            user = results + (user if isinstance(user, list) else [])
        messages.append({"role": "user", "content": user})
        blocks = draw(st.lists(ASSISTANT_BLOCK, max_size=3))
        calls = [
            {"type": "tool_use", "id": f"toolu_{turn}_{k}", "name": "tool", "input": draw(ARGS)}
            for k in range(draw(st.integers(0, 2)))
        ]
        if not blocks and not calls:
            # A results-only user message followed by another user message with
            # blocks comes back as one message (the documented merge): alternate.
            blocks = [{"type": "text", "text": "ok"}]
        if True:
            content = blocks + calls
            if (
                not calls
                and len(blocks) == 1
                and draw(st.booleans())
                and blocks[0]["type"] == "text"
            ):
                content = blocks[0]["text"]
            messages.append({"role": "assistant", "content": content})
    return messages


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_any_well_formed_conversation_round_trips(messages):
    transcript = anthropic.messages_to_transcript(copy.deepcopy(messages))
    for message in transcript:
        MessageIn.model_validate(message)
    assert anthropic.messages_from_transcript(transcript) == messages


def test_results_and_a_following_block_message_come_back_as_one_turn():
    # Consecutive user messages are one turn to the API; the way back writes it
    # as one message, results first (the documented merge). String content is
    # never merged: it cannot have shared a message with tool results.
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
        {"role": "user", "content": [{"type": "text", "text": "next"}]},
        {"role": "user", "content": "plain"},
    ]
    back = anthropic.messages_from_transcript(anthropic.messages_to_transcript(messages))
    assert back == [
        *messages[:2],
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                {"type": "text", "text": "next"},
            ],
        },
        {"role": "user", "content": "plain"},
    ]
