"""An empty history still builds a request the providers accept (engine.wellformed.with_user_turn).

A session with a system prompt only, or one whose compaction put the summary
in the system prompt (``summary_role`` system) and kept no message, has nothing
to send as messages; the Messages API rejects ``messages: []``. The assembler
then sends one marked synthetic user line, built per request, never stored.
"""

from __future__ import annotations

import json

import pytest

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, PromptSection, ToolDef
from contextsvc.engine.prompt import CachePlan
from contextsvc.engine.wellformed import EMPTY_AFTER_SUMMARY_TEXT, EMPTY_HISTORY_TEXT
from fakes.anthropic_rules import validate
from fakes.openai_rules import validate_chat
from fakes.responses_rules import validate_responses

SUMMARY = "We fixed the parser; next: the tests."


def parts(**kw) -> ContextParts:
    base = dict(
        model="m",
        max_output_tokens=100,
        sections=[PromptSection(name="base", content="You are an agent.")],
        tools=[ToolDef(name="bash")],
        notes=("[status: 3%]",),
        cache=CachePlan(system=(0,), history=True, tools=True),
    )
    base.update(kw)
    return ContextParts(**base)


def accepted(fmt: str, body: dict) -> None:
    {"anthropic": validate, "openai": validate_chat}.get(
        fmt, lambda b: validate_responses(b, set())
    )(body)


def user_texts(fmt: str, body: dict) -> list[str]:
    """The text of every user turn of a body, in order."""
    if fmt == "anthropic":
        out = []
        for m in body["messages"]:
            if m["role"] == "user":
                blocks = m["content"]
                out.extend([blocks] if isinstance(blocks, str) else [b["text"] for b in blocks])
        return out
    key = "messages" if fmt == "openai" else "input"
    return [m["content"] for m in body[key] if m.get("role") == "user"]


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "responses"])
@pytest.mark.parametrize("summary_role", [None, "system"])
@pytest.mark.parametrize("dropped", [[], [Message(role="user", content="   ", seq=1)]])
def test_empty_history_still_builds_an_accepted_request(fmt, summary_role, dropped):
    # ``dropped``: a window whose only message has nothing to send is empty too.
    kw = {"summary": SUMMARY, "summary_role": summary_role} if summary_role else {}
    messages = list(dropped)
    body = build_request(fmt, parts(messages=messages, **kw))
    accepted(fmt, body)
    expected = EMPTY_AFTER_SUMMARY_TEXT if summary_role else EMPTY_HISTORY_TEXT
    assert user_texts(fmt, body)[0] == expected
    if summary_role:
        # The summary stays where the policy puts it (the system prompt), once.
        assert json.dumps(body).count(SUMMARY) == 1
    assert messages == list(dropped)  # the input (the transcript view) is untouched


def test_empty_history_anthropic_tail_rides_the_synthetic_turn_without_a_breakpoint():
    body = build_request("anthropic", parts(messages=[]))
    assert [m["role"] for m in body["messages"]] == ["user"]
    blocks = body["messages"][0]["content"]
    assert [b["text"] for b in blocks] == [EMPTY_HISTORY_TEXT, "[status: 3%]"]
    # The synthetic turn is gone from the next call: no cache write on it.
    assert not any("cache_control" in b for b in blocks)
    assert all(b["text"] != "[status: 3%]" for b in body["system"])


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "responses"])
def test_empty_history_with_a_user_summary_or_retain_needs_no_synthetic_turn(fmt):
    for kw in ({"summary": SUMMARY}, {"retain": "- keep parser.py"}):
        body = build_request(fmt, parts(messages=[], **kw))
        accepted(fmt, body)
        texts = user_texts(fmt, body)
        assert EMPTY_HISTORY_TEXT not in json.dumps(body)
        assert SUMMARY in texts[0] or "keep parser.py" in texts[0]


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "responses"])
def test_empty_history_with_a_final_instruction_sends_only_the_instruction(fmt):
    body = build_request(fmt, parts(messages=[], final_instruction="Finish now."))
    accepted(fmt, body)
    assert user_texts(fmt, body)[-1] == "Finish now."
    assert EMPTY_HISTORY_TEXT not in json.dumps(body)


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "responses"])
@pytest.mark.parametrize("summary_role", ["user", "system"])
def test_history_starting_with_an_assistant_turn_gets_a_user_turn_first(fmt, summary_role):
    history = [Message(role="assistant", content="Done with step 1.", seq=7)]
    body = build_request(fmt, parts(messages=history, summary=SUMMARY, summary_role=summary_role))
    accepted(fmt, body)
    assert user_texts(fmt, body)
    assert EMPTY_HISTORY_TEXT not in json.dumps(body)


def test_empty_history_raw_format_shows_the_transcript_as_it_is():
    # ``raw`` is the transcript view: no synthetic turn there.
    body = build_request("raw", parts(messages=[], summary=SUMMARY, summary_role="system"))
    assert body["messages"] == []
