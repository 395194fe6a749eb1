"""A message is rendered once per object (``providers.history.memo``), and no build sees another's edits.

The context cache hands the same message objects to every build of a
session; the build, the proxy and the API then mark, merge and trim the body
they got. Each test changes a built body every way those do, builds again
from the same objects, and compares with a build from fresh copies (which
have no memo). Anthropic blocks are shared with the memo (a build copies
none per message): they are changed by replacing them with changed copies,
as the build's marker and ``proxy.providers.anthropic_cache.cap_breakpoints`` do.
Responses items and Chat Completions messages are shared whole (a build
copies none): one is changed by replacing it in the body's list.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.prompt import CachePlan


def history() -> list[Message]:
    return [
        Message(role="user", content="List the files.", seq=1),
        Message(role="assistant", content="Looking.", seq=2),
        Message(role="user", content=[{"type": "text", "text": "Then read a.py."}], seq=3),
        Message(
            role="assistant",
            content="",
            tool_calls=(ToolCall("c1", "Bash", {"command": "ls"}),),
            seq=4,
        ),
        Message(role="tool", content="a.py\nb.py", tool_call_id="c1", name="Bash", seq=5),
        Message(role="tool", content="x" * 50, tool_call_id="c9", name="Bash", seq=6),
        Message(role="assistant", content="Two files. ", seq=7),
    ]


def parts(messages: list[Message]) -> ContextParts:
    return ContextParts(
        model="claude-fake-large",
        max_output_tokens=1000,
        messages=messages,
        tools=[ToolDef(name="Bash", description="Run a command")],
        notes=["[status: 10% of the window]"],
        cache=CachePlan(system=(), tools=True, history=True),
    )


def fresh(messages: list[Message]) -> list[Message]:
    """The same messages as new objects (no memo)."""
    return [copy.deepcopy(replace(m)) for m in messages]


def scribble(body: dict, fmt: str) -> None:
    """Change a built body's messages (items) and their block lists, as later code may:
    markers added and removed, text trimmed, blocks appended (the memo's promise: these),
    each changed block replaced by a changed copy; a Responses item or a Chat Completions
    message is replaced whole."""
    if fmt in ("responses", "openai"):
        items = body["input" if fmt == "responses" else "messages"]
        for i, item in enumerate(items):
            content = item.get("content")
            items[i] = {**item, "seen": True}
            if isinstance(content, list):
                items[i]["content"] = [*content, {"type": "output_text", "text": "ADDED"}]
        return
    for message in body["messages"]:
        message["seen"] = True
        content = message.get("content")
        if isinstance(content, list):
            for i, block in enumerate(content):
                changed = {**block, "cache_control": {"type": "ephemeral"}}
                if "text" in block:
                    changed["text"] = "CHANGED"
                content[i] = changed
            content.append({"type": "text", "text": "ADDED"})


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "responses"])
def test_a_second_build_equals_one_from_fresh_messages_after_the_first_was_changed(fmt):
    messages = history()
    first = build_request(fmt, parts(messages))
    assert first == build_request(fmt, parts(fresh(messages)))
    scribble(first, fmt)
    assert build_request(fmt, parts(messages)) == build_request(fmt, parts(fresh(messages)))


@pytest.mark.parametrize("fmt", ["anthropic", "openai", "responses"])
def test_a_message_is_rendered_once_per_format(fmt):
    messages = history()
    build_request(fmt, parts(messages))
    kept = {id(m): dict(m.rendered or {}) for m in messages}
    assert any(kept.values())
    build_request(fmt, parts(messages))
    for m in messages:
        assert all(m.rendered[k] is v for k, v in kept[id(m)].items())


def test_a_changed_message_is_rendered_again():
    messages = history()
    build_request("anthropic", parts(messages))
    assert messages[1].rendered
    changed = replace(messages[1], content="Looked.")
    assert changed.rendered is None  # ``replace`` does not carry the memo
    body = build_request("anthropic", parts([*messages[:1], changed, *messages[2:]]))
    assert body["messages"][1]["content"][0]["text"] == "Looked."


def test_the_history_marker_stays_on_the_build_that_placed_it():
    """The newest block is marked by a copy: the next build, one message longer, has
    one marker (on its own newest block), none on the block that was newest before."""
    messages = history()
    build_request("anthropic", parts(messages))
    longer = [*messages, Message(role="user", content="And c.py?", seq=8)]
    body = build_request("anthropic", parts(longer))
    marked = [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if "cache_control" in block
    ]
    assert len(marked) == 1
    assert body == build_request("anthropic", parts(fresh(longer)))
