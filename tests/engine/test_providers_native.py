"""Native formats both ways (``?format=`` of POST /messages and GET /context), as properties.

native → transcript (``providers.native``, the proxy's converters) → the
context build (``engine.build``) → native is the identity for every message
kind each provider allows, apart from the documented differences: no
``reasoning_content`` goes back to an OpenAI-format request, and the
service's own cache markers (off here).
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.providers import native
from sessions.schemas import MessageIn

# Texts a provider takes as they are: not empty, no edge whitespace (the build
# drops whitespace-only blocks and trims a final assistant prefill).
TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc")),
    min_size=1,
    max_size=12,
)
# The service refuses integers past 64 bits in JSON (a 422): agents' arguments stay within.
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ARGS = st.dictionaries(st.text(max_size=4), st.one_of(INT64, TEXT), max_size=3)
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
IMAGE_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}
THINKING = {"type": "thinking", "thinking": "plan", "signature": "sig=="}
REDACTED = {"type": "redacted_thinking", "data": "opaque=="}


def _build(fmt: str, transcript: list[dict]) -> dict:
    messages = []
    for data in transcript:
        valid = MessageIn.model_validate(data).model_dump()
        messages.append(
            Message(
                role=valid["role"],
                content=valid["content"],
                tool_calls=tuple(
                    ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"])
                    for c in valid["tool_calls"]
                ),
                tool_call_id=valid["tool_call_id"],
                name=valid["name"],
                reasoning=valid["reasoning"],
                seq=len(messages) + 1,
            )
        )
    tool = ToolDef(name="f", description="", input_schema={"type": "object"})
    return build_request(
        fmt, ContextParts(model="m", max_output_tokens=100, messages=messages, tools=[tool])
    )


def _round_trip(fmt: str, messages: list[dict]) -> list[dict]:
    transcript, starts = native.to_transcript(fmt, copy.deepcopy(messages))
    assert len(starts) == len(transcript)
    body = _build(fmt, transcript)
    return body["input"] if fmt == "responses" else body["messages"]


# --- anthropic ---------------------------------------------------------------------------

A_TEXT = st.builds(lambda t: {"type": "text", "text": t}, TEXT)


@st.composite
def anthropic_conversations(draw) -> list[dict]:
    messages: list[dict] = []
    pending: list[str] = []
    for turn in range(draw(st.integers(1, 4))):
        results = [
            {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": draw(
                    st.one_of(
                        TEXT, st.lists(st.one_of(A_TEXT, st.just(IMAGE)), min_size=1, max_size=2)
                    )
                ),
                **draw(st.sampled_from([{}, {"is_error": True}])),
            }
            for call_id in pending
        ]
        rest = draw(
            st.one_of(TEXT, st.lists(st.one_of(A_TEXT, st.just(IMAGE)), min_size=1, max_size=2))
        )
        if results:
            rest = results + (rest if isinstance(rest, list) else [{"type": "text", "text": rest}])
        messages.append({"role": "user", "content": rest})
        if draw(st.booleans()):
            messages.append({"role": "system", "content": [{"type": "text", "text": draw(TEXT)}]})
        blocks = draw(st.lists(st.one_of(A_TEXT, st.just(THINKING), st.just(REDACTED)), max_size=2))
        pending = [f"toolu_{turn}_{k}" for k in range(draw(st.integers(0, 2)))]
        calls = [{"type": "tool_use", "id": c, "name": "f", "input": draw(ARGS)} for c in pending]
        if not blocks and not calls:
            blocks = [{"type": "text", "text": draw(TEXT)}]
        content: str | list = blocks + calls
        if not calls and len(blocks) == 1 and blocks[0]["type"] == "text" and draw(st.booleans()):
            content = blocks[0]["text"]
        messages.append({"role": "assistant", "content": content})
    if pending:
        results = [
            {"type": "tool_result", "tool_use_id": c, "content": draw(TEXT)} for c in pending
        ]
        messages.append({"role": "user", "content": results})
    return messages


@settings(max_examples=150, deadline=None)
@given(anthropic_conversations())
def test_anthropic_native_round_trips_through_the_context_build(messages):
    assert _round_trip("anthropic", messages) == messages


# --- openai chat ---------------------------------------------------------------------------

O_PARTS = st.lists(
    st.one_of(st.builds(lambda t: {"type": "text", "text": t}, TEXT), st.just(IMAGE_URL)),
    min_size=1,
    max_size=2,
)


@st.composite
def openai_conversations(draw) -> list[dict]:
    messages: list[dict] = []
    for turn in range(draw(st.integers(1, 4))):
        user: dict = {"role": "user", "content": draw(st.one_of(TEXT, O_PARTS))}
        if draw(st.booleans()):
            user["name"] = "ann"
        messages.append(user)
        calls = [
            {
                "id": f"call_{turn}_{k}",
                "type": "function",
                "function": {"name": "f", "arguments": json.dumps(draw(ARGS), ensure_ascii=False)},
            }
            for k in range(draw(st.integers(0, 2)))
        ]
        assistant: dict = {
            "role": "assistant",
            "content": draw(TEXT) if not calls or draw(st.booleans()) else None,
        }
        if calls:
            assistant["tool_calls"] = calls
        messages.append(assistant)
        for call in calls:
            content = draw(
                st.one_of(
                    TEXT,
                    st.lists(
                        st.builds(lambda t: {"type": "text", "text": t}, TEXT),
                        min_size=1,
                        max_size=2,
                    ),
                )
            )
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        if draw(st.booleans()):
            role = draw(st.sampled_from(["system", "developer"]))
            messages.append({"role": role, "content": draw(TEXT)})
    return messages


@settings(max_examples=150, deadline=None)
@given(openai_conversations())
def test_openai_native_round_trips_through_the_context_build(messages):
    assert _round_trip("openai", messages) == messages


def test_openai_reasoning_content_is_stored_but_not_sent_back():
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "reasoning_content": "greet"},
    ]
    transcript, _ = native.to_transcript("openai", messages)
    assert transcript[1]["reasoning"] == "greet"
    assert _round_trip("openai", messages) == [
        messages[0],
        {"role": "assistant", "content": "hello"},
    ]


# --- openai responses ------------------------------------------------------------------------


@st.composite
def responses_conversations(draw) -> list[dict]:
    items: list[dict] = []
    for turn in range(draw(st.integers(1, 4))):
        content = draw(
            st.one_of(
                TEXT,
                st.lists(
                    st.builds(lambda t: {"type": "input_text", "text": t}, TEXT),
                    min_size=1,
                    max_size=2,
                ),
            )
        )
        user = {"role": "user", "content": content}
        if draw(st.booleans()):
            user = {"type": "message", **user}
        items.append(user)
        if draw(st.booleans()):
            items.append(
                {"role": draw(st.sampled_from(["system", "developer"])), "content": draw(TEXT)}
            )
        if draw(st.booleans()):
            items.append({
                "type": "reasoning", "id": f"rs_{turn}",
                "summary": [{"type": "summary_text", "text": draw(TEXT)}],
                "encrypted_content": draw(TEXT),
            })  # fmt: skip
        if draw(st.booleans()):
            items.append({
                "type": "message", "id": f"msg_{turn}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": draw(TEXT), "annotations": []}],
            })  # fmt: skip
        calls = [f"call_{turn}_{k}" for k in range(draw(st.integers(0, 2)))]
        for c in calls:
            items.append({
                "type": "function_call", "id": f"fc_{c}", "call_id": c, "name": "f",
                "arguments": json.dumps(draw(ARGS), ensure_ascii=False), "status": "completed",
            })  # fmt: skip
        if (
            not calls
            and items[-1].get("role") != "assistant"
            and items[-1].get("type") != "reasoning"
        ):
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": draw(TEXT)}],
                }
            )
        for c in calls:
            output = draw(
                st.one_of(
                    TEXT,
                    st.lists(
                        st.builds(lambda t: {"type": "input_text", "text": t}, TEXT),
                        min_size=1,
                        max_size=2,
                    ),
                )
            )
            items.append({"type": "function_call_output", "call_id": c, "output": output})
    return items


@settings(max_examples=150, deadline=None)
@given(responses_conversations())
def test_responses_native_round_trips_through_the_context_build(items):
    assert _round_trip("responses", items) == items


# --- the index map names the native message ----------------------------------------------


@pytest.mark.parametrize(
    "fmt, messages, starts",
    [
        (
            "anthropic",
            [
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": "x"},
                        {"type": "text", "text": "b"},
                    ],
                },
            ],
            [0, 1, 2, 2],
        ),
        (
            "responses",
            [
                {"role": "user", "content": "a"},
                {"type": "reasoning", "id": "r", "summary": []},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "x"},
            ],
            [0, 1, 3],
        ),
    ],
)
def test_each_transcript_message_knows_the_native_message_it_starts_at(fmt, messages, starts):
    assert native.to_transcript(fmt, messages)[1] == starts
