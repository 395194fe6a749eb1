"""A tool-call id reused once its call was answered: every request still has unique ids.

Appends accept the reuse (as OpenAI does); the build renames a repeat
(``<id>_2``) with the result that answers it and with what the provider
converters keep for the call in the message's meta, and pairs each result
with the latest open call of its id.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.providers import anthropic, openai_chat, openai_responses
from contextsvc.engine.wellformed import NO_RESULT_TEXT, well_formed
from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from fakes.responses_rules import validate_responses


def engine(d: dict[str, Any]) -> Message:
    """A transcript dict (what the converters give the append) as the engine's message."""
    return Message(
        role=d["role"],
        content=d.get("content", ""),
        tool_calls=tuple(
            ToolCall(c["id"], c["name"], c["arguments"]) for c in d.get("tool_calls", ())
        ),
        tool_call_id=d.get("tool_call_id"),
        name=d.get("name"),
    )


def parts(messages: list[Message], *tools: str) -> ContextParts:
    return ContextParts(
        model="m",
        max_output_tokens=100,
        messages=messages,
        tools=[ToolDef(name=t) for t in tools or ("bash",)],
    )


def call(call_id: str, n: int) -> Message:
    return Message(role="assistant", tool_calls=(ToolCall(call_id, "bash", {"n": n}),))


def result(call_id: str, text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id)


def test_a_reused_id_is_renamed_in_the_request_with_the_result_answering_it():
    history = [
        Message(role="user", content="go"),
        call("x", 1),
        result("x", "one"),
        call("x", 2),
        result("x", "two"),
        call("x", 3),
    ]
    sent = well_formed(history)
    assert [(c.id, c.arguments["n"]) for m in sent for c in m.tool_calls] == [
        ("x", 1),
        ("x_2", 2),
        ("x_3", 3),
    ]
    assert [(m.tool_call_id, m.text) for m in sent if m.role == "tool"] == [
        ("x", "one"),
        ("x_2", "two"),
        ("x_3", NO_RESULT_TEXT),
    ]
    # The stored messages are not changed: this is a view.
    assert [c.id for m in history for c in m.tool_calls] == ["x", "x", "x"]


def test_an_anthropic_tool_use_keeps_its_extra_keys_under_its_new_id():
    posted = anthropic.messages_to_transcript(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [_use("t", "ls")]},
            {"role": "user", "content": [_result("t", "one")]},
            {"role": "assistant", "content": [{**_use("t", "pwd"), "caller": {"type": "direct"}}]},
            {"role": "user", "content": [_result("t", "two")]},
        ]
    )
    body = build_request("anthropic", parts([engine(d) for d in posted]))
    validate(body)
    uses = [b for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert [(b["id"], b.get("caller")) for b in uses] == [("t", None), ("t_2", {"type": "direct"})]


def test_an_openai_argument_text_stays_with_its_call_under_its_new_id():
    posted = openai_chat.messages_to_transcript(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [_fn("c", '{"a": 1}')]},
            {"role": "tool", "tool_call_id": "c", "content": "one"},
            {"role": "assistant", "content": None, "tool_calls": [_fn("c", "[1, 2]")]},
            {"role": "tool", "tool_call_id": "c", "content": "two"},
        ]
    )
    body = build_request("openai", parts([engine(d) for d in posted]))
    validate_chat(body)
    sent = [c for m in body["messages"] for c in m.get("tool_calls") or ()]
    assert [(c["id"], c["function"]["arguments"]) for c in sent] == [
        ("c", '{"a": 1}'),
        ("c_2", "[1, 2]"),
    ]


def test_a_responses_custom_tool_call_keeps_its_type_under_its_new_id():
    items = [
        {"role": "user", "content": "go"},
        {"type": "custom_tool_call", "call_id": "p", "name": "apply_patch", "input": "patch 1"},
        {"type": "custom_tool_call_output", "call_id": "p", "output": "done 1"},
        {"type": "message", "role": "assistant", "content": [_text("and again")]},
        {"type": "custom_tool_call", "call_id": "p", "name": "apply_patch", "input": "patch 2"},
        {"type": "custom_tool_call_output", "call_id": "p", "output": "done 2"},
    ]
    posted = openai_responses.request_to_transcript({"model": "m", "input": items}).messages
    body = build_request("responses", parts([engine(d) for d in posted], "apply_patch"))
    validate_responses(body, set())
    sent = [(i.get("type"), i.get("call_id"), i.get("input")) for i in body["input"]]
    assert [s for s in sent if s[0] not in (None, "message")] == [
        ("custom_tool_call", "p", "patch 1"),
        ("custom_tool_call_output", "p", None),
        ("custom_tool_call", "p_2", "patch 2"),
        ("custom_tool_call_output", "p_2", None),
    ]
    # The call keeps its place after the turn's text.
    kinds = [i.get("type") for i in body["input"]]
    assert kinds[-3:] == ["message", "custom_tool_call", "custom_tool_call_output"]


def _use(use_id: str, command: str) -> dict:
    return {"type": "tool_use", "id": use_id, "name": "bash", "input": {"command": command}}


def _result(use_id: str, text: str) -> dict:
    return {"type": "tool_result", "tool_use_id": use_id, "content": text}


def _fn(call_id: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def _text(text: str) -> dict:
    return {"type": "output_text", "text": text}


# --- property: any interleaving an append accepts --------------------------------------------


@st.composite
def reusing_histories(draw: Any) -> list[Message]:
    """Users, calls (ids from a pool of three, never one still open) and their results
    (late, in any order, or never), as appends accept them. Call n's result reads
    ``out n``, so a test can tell which call a result answers."""
    history: list[Message] = [Message(role="user", content="go")]
    open_calls: list[tuple[str, int]] = []
    n = 0
    for _ in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(["user", "call", "result", "result"]))
        free = [i for i in ("a", "b", "c") if i not in {c for c, _ in open_calls}]
        if kind == "call" and free:
            ids = draw(st.lists(st.sampled_from(free), min_size=1, max_size=2, unique=True))
            calls = []
            for call_id in ids:
                n += 1
                calls.append(ToolCall(call_id, "bash", {"n": n}))
                open_calls.append((call_id, n))
            history.append(Message(role="assistant", tool_calls=tuple(calls)))
        elif kind == "result" and open_calls:
            call_id, k = open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))
            history.append(result(call_id, f"out {k}"))
        else:
            history.append(Message(role="user", content="next"))
    return history


@settings(max_examples=300, deadline=None)
@given(history=reusing_histories())
def test_property_every_tool_use_has_one_result_of_its_own_call_and_ids_are_unique(history):
    body = build_request("anthropic", parts(history))
    validate(body)  # unique tool_use ids, each answered right after its message
    uses: dict[str, int] = {}
    answered: dict[str, str] = {}
    for message in body["messages"]:
        for block in message["content"]:
            if block["type"] == "tool_use":
                assert block["id"] not in uses
                uses[block["id"]] = block["input"]["n"]
            elif block["type"] == "tool_result":
                assert block["tool_use_id"] not in answered
                answered[block["tool_use_id"]] = block["content"]
    assert set(answered) == set(uses)
    posted = {m.text for m in history if m.role == "tool"}
    for use_id, n in uses.items():
        expected = f"out {n}" if f"out {n}" in posted else NO_RESULT_TEXT
        assert answered[use_id] == expected
    validate_chat(build_request("openai", parts(history)))
    validate_responses(build_request("responses", parts(history)), set())
