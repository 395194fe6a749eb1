"""Responses API items to and from the transcript, replies and streams (``providers.openai_responses*``).

Items are the documented Responses shapes as Codex CLI and the SDKs send
them: easy messages, typed messages with ``input_text`` / ``output_text``
parts, ``reasoning`` with ``encrypted_content``, ``function_call`` /
``function_call_output``, ``custom_tool_call``, hosted-tool items and
references.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.providers import openai_responses as conv
from contextsvc.engine.providers.common import ConversionError
from contextsvc.engine.providers.openai_responses_reply import (
    ResponsesStream,
    reply_from_response,
    response_events,
    response_object,
)
from fakes.responses_server import stream_events
from sessions.schemas import MessageIn

CODEX_INPUT = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "perm"}]},
    {"type": "message", "id": "msg_1", "role": "user",
     "content": [{"type": "input_text", "text": "<environment_context/>"}]},
    {"role": "user", "content": "do it"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "ENC1"},
    {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "exec_command",
     "arguments": "{\"cmd\": \"ls\"}", "status": "completed"},
    {"type": "function_call_output", "call_id": "c1", "output": "a\nb"},
    {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "x"}],
     "encrypted_content": "ENC2"},
    {"type": "message", "role": "assistant", "id": "msg_2", "status": "completed",
     "content": [{"type": "output_text", "text": "done", "annotations": []}]},
    {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin"},
    {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
    {"type": "message", "role": "developer", "content": "mid-conversation rule"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
    {"type": "item_reference", "id": "x"},
    {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "[1, 2]"},
    {"type": "function_call_output", "call_id": "c3",
     "output": [{"type": "input_text", "text": "t"}]},
]  # fmt: skip


def test_codex_input_round_trips_and_the_transcript_is_valid():
    converted = conv.request_to_transcript(
        {"model": "m", "input": CODEX_INPUT, "instructions": "base", "store": False}
    )
    assert [s.name for s in converted.sections] == ["instructions", "developer.0"]
    assert converted.rest == {"model": "m", "store": False}
    for message in converted.messages:
        MessageIn.model_validate(message)  # what the append service accepts
    roles = [m["role"] for m in converted.messages]
    assert roles == [
        "user", "user", "assistant", "tool", "assistant", "tool", "system", "assistant", "user",
        "assistant", "tool",
    ]  # fmt: skip
    assert conv.items_from_transcript(converted.messages) == CODEX_INPUT[1:]


def test_reasoning_is_kept_whole_in_its_turn():
    converted = conv.request_to_transcript({"model": "m", "input": CODEX_INPUT})
    turn = converted.messages[2]
    assert turn["tool_calls"] == [{"id": "c1", "name": "exec_command", "arguments": {"cmd": "ls"}}]
    parts = [p for p in turn["content"] if p.get("type") == "reasoning"]
    assert parts == [CODEX_INPUT[3]]


def test_units_group_one_turn_per_transcript_message():
    units = conv.group_units(CODEX_INPUT[1:])
    assert [len(u["items"]) for u in units] == [1, 1, 2, 1, 3, 1, 1, 1, 1, 1, 1]
    assert len(units) == len(conv.units_to_transcript(units))


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input.0.role"),
        ({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}, "input.0"),
        ({"model": "m", "input": [{"role": "user", "content": 5}]}, "input.0.content"),
    ],
)
def test_bodies_the_api_rejects_raise_conversion_errors(body, path):
    with pytest.raises(ConversionError) as raised:
        conv.request_to_transcript(body)
    assert raised.value.path.startswith(path)


def test_tools_keep_their_extras_and_hosted_tools_pass_through():
    tools = [
        {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"},
         "strict": True},
        {"type": "web_search"},
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
    ]  # fmt: skip
    converted = conv.request_to_transcript({"model": "m", "input": "hi", "tools": tools})
    assert [t.name for t in converted.tools] == ["f"]
    assert converted.tool_extras == {"f": {"strict": True}}
    assert converted.other_tools == tools[1:]


def test_reply_from_a_response_and_from_its_stream_agree():
    output = [
        {"id": "rs_9", "type": "reasoning", "summary": [], "encrypted_content": "E"},
        {"id": "msg_9", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "hello there", "annotations": []}]},
        {"id": "fc_9", "type": "function_call", "call_id": "c9", "name": "f",
         "arguments": "{\"a\": 1}", "status": "completed"},
    ]  # fmt: skip
    response = response_object(response_id="resp_9", model="m", output=output, created_at=1)
    response["usage"] = {
        "input_tokens": 100, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 7,
    }  # fmt: skip
    whole = reply_from_response(response)
    stream = ResponsesStream()
    for event in stream_events(response):
        stream.feed(event)
    streamed = stream.result()
    assert streamed.message == whole.message and not streamed.incomplete
    assert whole.usage.to_dict() == {
        "input_tokens": 60, "output_tokens": 7, "cache_creation_tokens": 0, "cache_read_tokens": 40,
    }  # fmt: skip
    assert conv.items_from_transcript([whole.message]) == output


def test_a_cut_stream_keeps_text_and_drops_unfinished_items():
    output = [
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "partial answer", "annotations": []}]},
        {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f",
         "arguments": "{\"long\": true}", "status": "completed"},
    ]  # fmt: skip
    events = stream_events(response_object(response_id="r", model="m", output=output, created_at=1))
    cut = next(i for i, e in enumerate(events) if e["type"] == "response.output_text.done")
    stream = ResponsesStream()
    for event in events[:cut]:
        stream.feed(event)
    reply = stream.result()
    assert reply.incomplete and "tool_calls" not in reply.message
    assert "partial answer" in json.dumps(reply.message)


def test_events_of_a_response_follow_the_api_order():
    response = response_object(
        response_id="r",
        model="m",
        output=[{"type": "message", "id": "m1", "role": "assistant",
                 "content": [{"type": "output_text", "text": "hi"}]}],
        created_at=1,
    )  # fmt: skip
    kinds = [e["type"] for e in response_events(response)]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.index("response.output_text.delta") < kinds.index("response.output_item.done")


def test_the_responses_format_builds_instructions_items_and_tools():
    reasoning = {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "E"}
    history = [
        Message(role="user", content="go"),
        Message(role="assistant", content=[reasoning],
                tool_calls=(ToolCall(id="c", name="ls", arguments={}),)),
        Message(role="tool", content="x" * 10, tool_call_id="c", view="[trimmed]"),
        Message(role="system", content="a mid-conversation rule"),
    ]  # fmt: skip
    parts = ContextParts(
        model="gpt-5.1",
        max_output_tokens=100,
        messages=history,
        tools=[ToolDef(name="ls", description="list", input_schema={"type": "object"})],
        summary="earlier work",
        notes=["status: fine"],
    )
    body = build_request("responses", parts)
    items = body["input"]
    assert items[0]["role"] == "user" and "earlier work" in json.dumps(items)
    assert reasoning in items  # verbatim
    assert {"type": "function_call_output", "call_id": "c", "output": "[trimmed]"} in items
    assert {"role": "system", "content": "a mid-conversation rule"} in items
    assert items[-1] == {"role": "developer", "content": "status: fine"}
    assert body["tools"] == [
        {"type": "function", "name": "ls", "description": "list", "parameters": {"type": "object"}}
    ]


texts = st.text(min_size=1, max_size=20)
user_items = st.builds(lambda t: {"role": "user", "content": t}, texts)


@st.composite
def turns(draw) -> list[dict]:
    n = draw(st.integers(0, 3))
    items: list[dict] = []
    if draw(st.booleans()):
        items.append(
            {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": draw(texts)}
        )
    if draw(st.booleans()):
        items.append({"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": draw(texts)}]})  # fmt: skip
    calls = [f"call_{draw(st.uuids()).hex[:8]}" for _ in range(n)]
    items += [
        {
            "type": "function_call",
            "call_id": c,
            "name": "f",
            "arguments": json.dumps({"k": draw(texts)}, ensure_ascii=False),
        }
        for c in calls
    ]
    items += [{"type": "function_call_output", "call_id": c, "output": draw(texts)} for c in calls]
    return items


@given(st.lists(st.one_of(user_items.map(lambda i: [i]), turns()), max_size=6))
@settings(max_examples=60, deadline=None)
def test_any_conversation_round_trips(chunks):
    items = [item for chunk in chunks for item in chunk]
    assert (
        conv.items_from_transcript(conv.request_to_transcript({"input": items}).messages) == items
    )
