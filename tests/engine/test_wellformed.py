"""engine.wellformed through the one assembler: each rule, in both provider formats.

Every body is also checked by the fake Messages server's validation and the
Chat Completions rules (fakes/), and each validator is shown to reject
what the old assembler sent, so the checks can fail.
"""

from __future__ import annotations

import copy

import pytest

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.wellformed import (
    LEADING_USER_TEXT,
    NO_RESULT_TEXT,
    well_formed,
)
from fakes.anthropic_rules import InvalidRequest, validate
from fakes.openai_rules import InvalidChatRequest, validate_chat

TOOLS = [ToolDef(name="bash"), ToolDef(name="read")]


def user(text: str) -> Message:
    return Message(role="user", content=text)


def say(text: str) -> Message:
    return Message(role="assistant", content=text)


def call(*ids: str, text: str = "") -> Message:
    return Message(
        role="assistant",
        content=text,
        tool_calls=tuple(ToolCall(id=i, name="bash", arguments={"c": i}) for i in ids),
    )


def result(call_id: str, text: str = "out") -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, name="bash")


def bodies(messages, **kw) -> tuple[dict, dict]:
    parts = ContextParts(model="m", max_output_tokens=100, messages=messages, tools=TOOLS, **kw)
    anthropic, openai = build_request("anthropic", parts), build_request("openai", parts)
    validate(anthropic)
    validate_chat(openai)
    return anthropic, openai


def shape(body: dict) -> list[tuple[str, list[str]]]:
    """(role, block kinds) per anthropic message."""
    return [(m["role"], [b["type"] for b in m["content"]]) for m in body["messages"]]


def oshape(body: dict) -> list[str]:
    return [m["role"] for m in body["messages"]]


def test_unanswered_call_gets_a_synthetic_result_right_after_it():
    history = [user("go"), call("a"), user("never mind, do b")]
    anthropic, openai = bodies(history)
    assert shape(anthropic) == [
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result", "text"]),  # the result first, then the user's words
    ]
    synthetic = anthropic["messages"][2]["content"][0]
    assert synthetic == {"type": "tool_result", "tool_use_id": "a", "content": NO_RESULT_TEXT}
    assert oshape(openai) == ["user", "assistant", "tool", "user"]
    assert openai["messages"][2] == {"role": "tool", "tool_call_id": "a", "content": NO_RESULT_TEXT}
    # The stored transcript is untouched: the input list is as it was.
    assert [m.role for m in history] == ["user", "assistant", "user"]


def test_only_the_missing_result_of_a_batch_is_synthetic():
    anthropic, openai = bodies([user("go"), call("a", "b"), result("b", "B")])
    contents = [(b["tool_use_id"], b["content"]) for b in anthropic["messages"][2]["content"]]
    assert contents == [("a", NO_RESULT_TEXT), ("b", "B")]
    assert [(m["tool_call_id"], m["content"]) for m in openai["messages"][2:]] == [
        ("a", NO_RESULT_TEXT),
        ("b", "B"),
    ]


def test_trailing_unanswered_call_is_closed_too():
    anthropic, openai = bodies([user("go"), call("a")])
    assert shape(anthropic)[-1] == ("user", ["tool_result"])
    assert oshape(openai)[-1] == "tool"


def test_late_result_moves_up_to_its_call():
    # The result arrived after the user spoke again (append allows it).
    anthropic, openai = bodies([user("go"), call("a"), user("still there?"), result("a", "A")])
    assert shape(anthropic) == [
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result", "text"]),
    ]
    assert anthropic["messages"][2]["content"][0]["content"] == "A"
    assert oshape(openai) == ["user", "assistant", "tool", "user"]


def test_history_starting_with_a_tool_call_gets_a_user_turn_first():
    anthropic, openai = bodies([call("a"), result("a")])
    assert shape(anthropic) == [
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
    ]
    assert anthropic["messages"][0]["content"][0]["text"] == LEADING_USER_TEXT
    assert oshape(openai) == ["user", "assistant", "tool"]


def test_summary_is_the_first_user_turn_when_there_is_one():
    anthropic, _ = bodies([say("I read it."), user("next")], summary="we fixed x")
    first = anthropic["messages"][0]["content"][0]["text"]
    assert first.startswith("[Summary of the earlier conversation]")
    assert LEADING_USER_TEXT not in str(anthropic)


def test_leading_orphan_result_is_kept_as_user_text():
    # A cut window starts at a result whose call fell outside it.
    anthropic, openai = bodies([result("gone", "the output"), say("ok"), user("go on")])
    assert shape(anthropic) == [("user", ["text"]), ("assistant", ["text"]), ("user", ["text"])]
    text = anthropic["messages"][0]["content"][0]["text"]
    assert "the output" in text and "gone" in text
    assert oshape(openai) == ["user", "assistant", "user"]
    assert "tool_result" not in str(anthropic)


def test_tool_call_right_after_another_assistant_message():
    anthropic, openai = bodies([user("go"), say("Let me look."), call("a"), result("a")])
    # Anthropic: one assistant turn, text then tool_use.
    assert shape(anthropic) == [
        ("user", ["text"]),
        ("assistant", ["text", "tool_use"]),
        ("user", ["tool_result"]),
    ]
    # OpenAI takes consecutive assistant messages; the call still has its tool message.
    assert oshape(openai) == ["user", "assistant", "assistant", "tool"]


def test_assistant_text_after_an_unanswered_call():
    anthropic, openai = bodies([user("go"), call("a"), say("It hangs; moving on.")])
    assert shape(anthropic) == [
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["text"]),
    ]
    assert oshape(openai) == ["user", "assistant", "tool", "assistant"]


def test_duplicate_ids_in_an_old_transcript_are_renamed_and_stay_paired():
    history = [user("go"), call("a"), result("a", "1"), call("a"), result("a", "2")]
    anthropic, openai = bodies(history)
    uses = [b["id"] for m in anthropic["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert uses == ["a", "a_2"]
    answers = [
        (b["tool_use_id"], b["content"])
        for m in anthropic["messages"]
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert answers == [("a", "1"), ("a_2", "2")]
    assert [m.get("tool_call_id") for m in openai["messages"] if m["role"] == "tool"] == [
        "a",
        "a_2",
    ]


def test_ids_outside_the_anthropic_pattern_are_made_safe_in_call_and_result():
    anthropic, openai = bodies([user("go"), call("fn:1.2"), result("fn:1.2")])
    assert anthropic["messages"][1]["content"][0]["id"] == "fn_1_2"
    assert anthropic["messages"][2]["content"][0]["tool_use_id"] == "fn_1_2"
    assert openai["messages"][2]["tool_call_id"] == "fn_1_2"


def test_whitespace_only_messages_are_left_out_and_a_prefill_is_trimmed():
    anthropic, openai = bodies([user("  \n"), user("go"), say("   "), say("Partial answer  \n")])
    assert shape(anthropic) == [("user", ["text"]), ("assistant", ["text"])]
    assert anthropic["messages"][-1]["content"][-1]["text"] == "Partial answer"
    assert oshape(openai) == ["user", "assistant"]


def test_blank_tool_output_is_sent_as_no_output():
    anthropic, _ = bodies([user("go"), call("a"), result("a", " ")])
    assert anthropic["messages"][2]["content"][0]["content"] == "(no output)"


def test_without_tools_calls_and_results_travel_as_text():
    parts = ContextParts(
        model="m", max_output_tokens=100, messages=[call("a", text="Looking."), result("a", "X")]
    )
    anthropic, openai = build_request("anthropic", parts), build_request("openai", parts)
    validate(anthropic)
    validate_chat(openai)
    assert shape(anthropic) == [("user", ["text"]), ("assistant", ["text"]), ("user", ["text"])]
    assert "[Called bash (call a)" in anthropic["messages"][1]["content"][0]["text"]
    assert "X" in anthropic["messages"][2]["content"][0]["text"]
    assert "tool_calls" not in str(openai)


def test_raw_stays_the_transcript_view():
    parts = ContextParts(
        model="m", max_output_tokens=100, messages=[call("a"), user("b")], tools=TOOLS
    )
    raw = build_request("raw", parts)
    assert [m["role"] for m in raw["messages"]] == ["assistant", "user"]


def test_well_formed_leaves_a_valid_history_as_it_is():
    history = [user("go"), call("a", "b"), result("a"), result("b"), say("done")]
    assert well_formed(history) == history


# --- the validators reject what the old assembler sent ------------------------------------


def old_anthropic_body() -> dict:
    use = {"type": "tool_use", "id": "a", "name": "bash", "input": {}}
    answer = {"type": "tool_result", "tool_use_id": "a", "content": "x"}
    return {
        "model": "m",
        "max_tokens": 10,
        "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [answer]},
        ],
    }


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b["messages"].pop(0), 'first message must use the "user" role'),
        (lambda b: b["messages"].pop(), "without `tool_result` blocks immediately after: a"),
        (
            lambda b: b["messages"][2]["content"].insert(0, {"type": "text", "text": "hi"}),
            "`tool_result` blocks must come first",
        ),
        (
            lambda b: b["messages"][2]["content"].append(dict(b["messages"][2]["content"][0])),
            "a single `tool_result`",
        ),
        (
            lambda b: b["messages"].extend(copy.deepcopy(b["messages"][1:3])),
            "`tool_use` ids must be unique: a",
        ),
        (
            lambda b: b["messages"][1]["content"][0].update(id="a.1"),
            "String should match pattern",
        ),
        (
            lambda b: b["messages"][0]["content"].append({"type": "text", "text": " \n"}),
            "non-whitespace text",
        ),
        (
            lambda b: b["messages"].append(
                {"role": "assistant", "content": [{"type": "text", "text": "so "}]}
            ),
            "cannot end with trailing whitespace",
        ),
        (
            # A tool call right after an assistant message that had an unanswered one.
            lambda b: b["messages"].insert(
                1,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "z", "name": "bash", "input": {}}],
                },
            ),
            "immediately after: z",
        ),
    ],
)
def test_fake_messages_validation_rejects(mutate, message):
    body = old_anthropic_body()
    validate(body)
    mutate(body)
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace("[", r"\[")):
        validate(body)


def old_openai_body() -> dict:
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "x"},
        ],
    }


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b["messages"].pop(), "did not have response messages: a"),
        (
            lambda b: b["messages"].insert(3, {"role": "user", "content": "wait"}),
            "did not have response messages: a",
        ),
        (
            lambda b: b["messages"].append({"role": "tool", "tool_call_id": "a", "content": "y"}),
            "must be a response to a preceeding message with 'tool_calls'",
        ),
        (
            lambda b: b["messages"].extend(copy.deepcopy(b["messages"][2:4])),
            "Duplicate value for 'tool_call_id'",
        ),
        (lambda b: b["messages"].pop(1), "must start with a user message"),
        (
            lambda b: b["messages"][2]["tool_calls"][0]["function"].update(arguments="{"),
            "is not valid JSON",
        ),
    ],
)
def test_chat_completions_rules_reject(mutate, message):
    body = old_openai_body()
    validate_chat(body)
    mutate(body)
    with pytest.raises(InvalidChatRequest, match=message.replace("(", r"\(")):
        validate_chat(body)
