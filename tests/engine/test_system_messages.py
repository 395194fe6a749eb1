"""Mid-conversation ``system`` messages: the build keeps them in place, compaction keeps the newest.

Pure engine tests. Every Anthropic body built here is checked by the suite's
fake Messages API (``fakes.anthropic_rules.validate``), which accepts a
system message only right after a user message and rejects it for an older
model, as the real API does.
"""

from __future__ import annotations

import pytest

from contextsvc.engine.build import SYSTEM_REMINDER_HEADER, ContextParts, build_request
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.strategies.base import StrategyContext, TokenCounter, Window
from contextsvc.engine.strategies.chain import run_chain
from contextsvc.engine.summarize import render_for_llm
from contextsvc.engine.system_carry import CARRY_OPEN, carry_system, split_carried, with_carried
from contextsvc.engine.tokens import get_tokenizer
from fakes.anthropic_rules import InvalidRequest, validate

COUNTER = TokenCounter(get_tokenizer())
RULE = "Use the Bash tool for every shell command."


def user(text: str = "List the files.") -> Message:
    return Message(role="user", content=text)


def system(text: str = RULE) -> Message:
    return Message(role="system", content=text)


def call(call_id: str) -> Message:
    return Message(
        role="assistant", content="", tool_calls=(ToolCall(call_id, "Bash", {"command": "ls"}),)
    )


def result(call_id: str, text: str = "a.py\nb.py") -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, name="Bash")


def parts(messages: list[Message], **kw) -> ContextParts:
    return ContextParts(model="claude-fake-large", max_output_tokens=1000, messages=messages, **kw)


def tools() -> list[ToolDef]:
    return [ToolDef(name="Bash", description="Run a command")]


def test_anthropic_keeps_a_system_message_after_a_user_turn_in_place():
    history = [user(), system(), call("c1"), result("c1"), Message(role="assistant", content="ok")]
    body = build_request("anthropic", parts(history, tools=tools()))
    assert [m["role"] for m in body["messages"]] == [
        "user",
        "system",
        "assistant",
        "user",
        "assistant",
    ]
    assert body["messages"][1]["content"] == [{"type": "text", "text": RULE}]
    validate(body)


def test_anthropic_system_message_after_an_assistant_turn_becomes_a_marked_user_reminder():
    history = [user(), Message(role="assistant", content="Sure."), system(), user("Go on.")]
    body = build_request("anthropic", parts(history))
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    texts = [b["text"] for b in body["messages"][2]["content"]]
    assert texts == [f"{SYSTEM_REMINDER_HEADER}\n{RULE}", "Go on."]
    validate(body)


def test_anthropic_for_a_model_without_mid_system_messages_sends_user_reminders():
    history = [user(), system(), call("c1"), result("c1")]
    body = build_request("anthropic", parts(history, tools=tools(), mid_system=False))
    roles = [m["role"] for m in body["messages"]]
    assert "system" not in roles
    first = [b["text"] for b in body["messages"][0]["content"]]
    assert first == ["List the files.", f"{SYSTEM_REMINDER_HEADER}\n{RULE}"]
    validate(body | {"model": "claude-sonnet-4-5"})


def test_the_fake_rejects_a_system_message_for_an_older_model_and_out_of_place():
    history = [user(), system()]
    body = build_request("anthropic", parts(history))
    with pytest.raises(InvalidRequest, match="not supported on this model"):
        validate(body | {"model": "claude-sonnet-4-5"})
    misplaced = {
        "model": "claude-fake-large",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "system", "content": RULE},
        ],
    }
    with pytest.raises(InvalidRequest, match="right after a user message"):
        validate(misplaced)


def test_consecutive_system_messages_travel_as_one_and_the_tail_follows_in_a_user_turn():
    history = [user(), system("one"), system("two")]
    body = build_request("anthropic", parts(history, notes=["[Context: 10% used]"]))
    assert [m["role"] for m in body["messages"]] == ["user", "system", "user"]
    assert [b["text"] for b in body["messages"][1]["content"]] == ["one", "two"]
    assert body["messages"][2]["content"] == [{"type": "text", "text": "[Context: 10% used]"}]
    assert body["system"] == []
    validate(body)


def test_a_window_that_starts_with_a_system_message_gets_a_user_turn_first():
    body = build_request("anthropic", parts([system(), user("Continue.")]))
    assert [m["role"] for m in body["messages"]] == ["user", "system", "user"]
    validate(body)


def test_openai_keeps_the_system_message_in_place_and_raw_shows_its_role():
    history = [user(), system(), Message(role="assistant", content="ok")]
    body = build_request("openai", parts(history))
    assert body["messages"] == [
        {"role": "user", "content": "List the files."},
        {"role": "system", "content": RULE},
        {"role": "assistant", "content": "ok"},
    ]
    raw = build_request("raw", parts(history))
    assert [m["role"] for m in raw["messages"]] == ["user", "system", "assistant"]


def test_the_summariser_reads_a_system_message_as_marked_user_text():
    rendered = render_for_llm([user(), system(), Message(role="assistant", content="ok")])
    assert [m.role for m in rendered] == ["user", "user", "assistant"]
    assert rendered[1].text == f"{SYSTEM_REMINDER_HEADER}\n{RULE}"


# --- compaction -------------------------------------------------------------------


def numbered(messages: list[Message]) -> list[Message]:
    for i, msg in enumerate(messages, start=1):
        msg.seq = i
        msg.token_count = COUNTER.message(msg)
    return messages


def claude_code_history(steps: int = 8) -> list[Message]:
    """What Claude Code sends: the task, its system message, then Bash steps."""
    history = [user("Find the bug."), system()]
    for k in range(steps):
        history += [call(f"c{k}"), result(f"c{k}", f"output {k}\n" + "x" * 2000)]
    history.append(Message(role="assistant", content="Found it."))
    history.append(user("Now fix it."))
    return numbered(history)


@pytest.mark.parametrize(
    "chain",
    [("drop_oldest_turns",), ("summarize",), ("tool_clearing", "summarize", "drop_oldest_turns")],
)
def test_compaction_carries_the_dropped_system_message_verbatim_above_the_summary(chain):
    window = Window(messages=claude_code_history())
    ctx = StrategyContext(counter=COUNTER, summarizer=OfflineSummarizer(), force=True)
    out = run_chain(window, chain, ctx).window
    assert all(m.role != "system" for m in out.messages)
    carried, _ = split_carried(out.retain)
    assert carried == [RULE]
    assert out.retain.startswith(CARRY_OPEN)


def test_the_carried_block_survives_a_later_compaction_that_rewrites_retain():
    first = Window(messages=claude_code_history())
    ctx = StrategyContext(counter=COUNTER, summarizer=OfflineSummarizer(), force=True)
    once = run_chain(first, ("summarize",), ctx).window
    later = [*once.messages]
    more = numbered([*claude_code_history()[2:]])
    for i, msg in enumerate(more, start=100):
        msg.seq = i
    twice = run_chain(
        Window(messages=[*later, *more], retain=once.retain, summary=once.summary),
        ("summarize",),
        ctx,
    ).window
    assert split_carried(twice.retain)[0] == [RULE]


def test_a_newer_system_message_of_the_same_kind_in_the_window_replaces_the_carried_one():
    kept = numbered([user(), system("<total_tokens>900 tokens left</total_tokens>")])
    before_retain = with_carried(
        "- keep a.py", ["Env block", "<total_tokens>1000 tokens left</total_tokens>"]
    )
    assert split_carried(carry_system(kept, before_retain, kept, before_retain)) == (
        ["Env block"],
        "- keep a.py",
    )
    dropped = carry_system(kept, before_retain, kept[:1], "- keep a.py")
    assert split_carried(dropped) == (
        ["Env block", "<total_tokens>900 tokens left</total_tokens>"],
        "- keep a.py",
    )


def test_claude_code_notes_keep_only_the_newest_of_each_kind():
    history = [user(), system("# Environment\ncwd: /work")]
    for k in range(5):
        history += [
            call(f"c{k}"),
            result(f"c{k}"),
            system(f"<total_tokens>{1000 - k} tokens left</total_tokens>"),
        ]
    history = numbered(history)
    retain = carry_system(history, "", history[-1:], "")
    assert split_carried(retain)[0] == ["# Environment\ncwd: /work"]
    retain = carry_system(history, "", history[-2:-1], "")
    assert split_carried(retain)[0] == [
        "# Environment\ncwd: /work",
        "<total_tokens>996 tokens left</total_tokens>",
    ]


def test_a_system_message_still_in_the_window_is_not_copied():
    history = claude_code_history(steps=1)
    assert carry_system(history, "", history[:], "") == ""


def test_a_tool_result_with_blocks_other_than_text_keeps_them():
    # Claude Code's own tool search answers with tool references: text alone would lose them.
    reference = {"type": "tool_reference", "tool_name": "Read"}
    history = [
        user(),
        call("c1"),
        Message(
            role="tool",
            content=[{"type": "text", "text": "found"}, reference],
            tool_call_id="c1",
            name="ToolSearch",
        ),
    ]
    body = build_request("anthropic", parts(history, tools=tools()))
    result = body["messages"][2]["content"][0]
    assert result["content"] == [{"type": "text", "text": "found"}, reference]
