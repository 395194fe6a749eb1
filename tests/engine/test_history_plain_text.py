"""engine.providers.history: a plain string message skips the converters' round
trip (most of a long history); what it builds must be what the converters build."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.providers import history
from contextsvc.engine.wellformed import has_content


def _both(build, msg):
    fast = build(msg)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(history, "_plain_text", lambda _msg: False)
        slow = build(msg)
    return fast, slow


TEXTS = st.one_of(st.sampled_from(["", " ", "\n\t", "hi", " padded "]), st.text(max_size=40))


@pytest.mark.parametrize("build", [history.anthropic_content, history.openai_message])
@given(
    role=st.sampled_from(["user", "assistant", "system", "tool"]),
    text=TEXTS,
    calls=st.booleans(),
    name=st.sampled_from([None, "bob"]),
)
def test_plain_strings_build_what_the_converters_build(build, role, text, calls, name):
    msg = Message(
        role=role,
        content=text,
        tool_calls=(ToolCall("c1", "bash", {"command": "ls"}),)
        if calls and role == "assistant"
        else (),
        tool_call_id="c0" if role == "tool" else None,
        name=name,
    )
    fast, slow = _both(build, msg)
    assert fast == slow


def test_only_plain_strings_take_the_short_path():
    assert history._plain_text(Message(role="user", content="hi"))
    assert not history._plain_text(Message(role="user", content=[{"type": "text", "text": "hi"}]))
    assert not history._plain_text(Message(role="tool", content="hi", tool_call_id="c"))
    assert not history._plain_text(Message(role="user", content="hi", name="bob"))
    assert not history._plain_text(
        Message(role="assistant", content="", tool_calls=(ToolCall("c", "bash"),))
    )


def _has_content_reference(msg: Message) -> bool:
    if msg.role == "tool" or msg.tool_calls:
        return True
    if msg.context_text.strip():
        return True
    return msg.view is None and msg.part_count > 0


@pytest.mark.parametrize(
    "msg",
    [
        Message(role="user", content="hi"),
        Message(role="user", content="  \n"),
        Message(role="assistant", content=""),
        Message(role="assistant", content="x", view="  "),
        Message(role="assistant", content="", view="seen"),
        Message(role="user", content=[{"type": "text", "text": " "}]),
        Message(role="user", content=[{"type": "text", "text": "a"}]),
        Message(role="user", content=[{"type": "image", "source": {}}]),
        Message(role="user", content=[{"type": "image", "source": {}}], view=" "),
        Message(role="user", content=[]),
        Message(role="tool", content="", tool_call_id="c"),
        Message(role="assistant", content="", tool_calls=(ToolCall("c", "bash"),)),
    ],
)
def test_has_content_of_a_string_skips_the_join_and_answers_the_same(msg):
    assert has_content(msg) == _has_content_reference(msg)
