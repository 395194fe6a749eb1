"""engine.history_memo: a build with a session's memo sends the same bytes as one without.

Each test replays a session's builds as the context cache hands the window
over (the same message objects while only appends happen) and compares every
body, as JSON bytes, with the body built from scratch: after appends, an edit
(another object for a message), a compaction (the window starts later, a
summary before it), a window restart, a retraction (a shorter history) and a
divergence (another history after a remembered prefix). A random walk covers
what the rules meet: calls answered late or never, reused and unsafe ids,
orphans, mid-conversation system messages, strings posted as one, empty turns.
"""

from __future__ import annotations

import random
from dataclasses import replace

import orjson
import pytest

from contextsvc.engine.build import FORMATS, ContextParts, build_request
from contextsvc.engine.history_memo import HistoryMemo
from contextsvc.engine.messages import Message, ToolCall, ToolDef
from contextsvc.engine.prompt import CachePlan
from contextsvc.engine.providers.common import META

TOOLS = (ToolDef(name="bash"), ToolDef(name="read"))


def as_string(text: str) -> list[dict]:
    """A string as the Anthropic converter stores it (given back as one)."""
    return [{"type": "text", "text": text, META: {"string": True}}]


def parts(messages, memo=None, **kw) -> ContextParts:
    kw.setdefault("tools", TOOLS)
    kw.setdefault("cache", CachePlan(history=True))
    kw.setdefault("notes", ("status: fine",))
    return ContextParts(model="m", max_output_tokens=100, messages=messages, memo=memo, **kw)


def check(messages, memo, fmt="anthropic", **kw) -> dict:
    """The body with ``memo``, asserted byte-identical to the one without."""
    with_memo = build_request(fmt, parts(list(messages), memo, **kw))
    without = build_request(fmt, parts(list(messages), None, **kw))
    assert orjson.dumps(with_memo) == orjson.dumps(without)
    return with_memo


class Walk:
    """Random appends in a session's shape: user turns, assistant text and calls, results."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.open: list[str] = []
        self.n = 0

    def next(self) -> Message:
        rng, self.n = self.rng, self.n + 1
        n = self.n
        roll = rng.random()
        if self.open and roll < 0.35:
            # A result: usually the oldest open call, sometimes a stray (orphan) one.
            cid = self.open.pop(rng.randrange(len(self.open))) if rng.random() < 0.9 else "gone"
            content = rng.choice([f"out {n}", "", "  ", [{"type": "text", "text": f"o{n}"}]])
            return Message(role="tool", content=content, tool_call_id=cid, name="bash", seq=n)
        if roll < 0.55:
            ids = [
                rng.choice([f"c{n}", "dup", "bad id!", f"c{n}x"]) for _ in range(rng.randint(1, 2))
            ]
            ids = list(dict.fromkeys(ids))
            self.open.extend(ids)
            calls = tuple(ToolCall(id=i, name="bash", arguments={"n": n}) for i in ids)
            text = rng.choice(["", f"calling {n}"])
            return Message(role="assistant", content=text, tool_calls=calls, seq=n)
        if roll < 0.62:
            return Message(role="system", content=f"reminder {n}", seq=n)
        if roll < 0.68:
            return Message(role="user", content=rng.choice(["", " "]), seq=n)
        role = rng.choice(["user", "user", "assistant"])
        if role == "user" and rng.random() < 0.3:
            self.open.clear()  # the user spoke again: some calls stay unanswered
        content = rng.choice(
            [f"{role} {n}", as_string(f"{role} {n}"), [{"type": "text", "text": f"t{n}"}]]
        )
        return Message(role=role, content=content, seq=n)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("fmt", ["anthropic", "openai", "responses"])
def test_appends_edits_compactions_and_restarts_build_the_same_body(seed, fmt):
    walk, memo = Walk(seed), HistoryMemo()
    rng = random.Random(seed + 1000)
    window: list[Message] = []
    summary = ""
    for step in range(120):
        window.extend(walk.next() for _ in range(rng.randint(1, 3)))
        event = rng.random()
        if event < 0.05 and window:
            # An edit (a trim, a clearing): the context cache reads another object.
            i = rng.randrange(len(window))
            window[i] = replace(window[i], view=f"[trimmed {step}]", view_state="trimmed")
        elif event < 0.08:
            window = window[len(window) // 2 :]  # a compaction: the window starts later
            summary = f"summary {step}"
        elif event < 0.10:
            window = [replace(m) for m in window]  # a restart: the window read again
        elif event < 0.12 and len(window) > 3:
            window = window[:-2]  # a retraction: the history is shorter
        elif event < 0.14 and len(window) > 3:
            window = [*window[:-2], walk.next()]  # a divergence after the remembered prefix
        check(window, memo, fmt, summary=summary, mid_system=seed % 2 == 0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_builds_the_same_body_with_a_memo(fmt):
    walk, memo = Walk(7), HistoryMemo()
    window: list[Message] = []
    for _ in range(60):
        window.append(walk.next())
        check(window, memo, fmt)


def test_a_history_without_tools_is_remembered_as_text():
    walk, memo = Walk(3), HistoryMemo()
    window: list[Message] = []
    for _ in range(80):
        window.append(walk.next())
        check(window, memo, tools=())
    assert memo.paired is not None and len(memo.paired.inputs) == len(window)


def test_only_the_appended_messages_are_rendered_again():
    """The point of the memo: the next build folds only the new turns."""
    memo = HistoryMemo()
    window = []
    for i in range(200):
        window += [
            Message(role="user", content=as_string(f"q{i}")),
            Message(role="assistant", content=f"a{i}"),
        ]
    check(window, memo)
    closed = memo.turns.closed
    assert len(closed) == len(window) - 1  # all but the newest turn are final
    window += [Message(role="user", content=as_string("next"))]
    body = check(window, memo)
    assert memo.turns.closed[: len(closed)] == closed
    assert all(
        a is b for a, b in zip(body["messages"], closed, strict=False)
    )  # shared, not rebuilt
    assert body["messages"][0] == {"role": "user", "content": "q0"}  # given back as a string


def test_a_format_converted_message_by_message_converts_only_the_new_messages():
    """Chat Completions and Responses: the items of the remembered history are taken
    as they were; only the messages past it are looked at."""
    memo, seen = HistoryMemo(), []

    def convert(msg):
        seen.append(msg)
        return [{"text": msg.content}, {"seq": msg.seq}]

    history = [Message(role="user", content=f"m{i}", seq=i) for i in range(200)]
    first = memo.items("responses", history, convert)
    assert len(seen) == 200 and len(first) == 400
    first.append({"the caller's": "own list"})
    seen.clear()
    # The leading line a build makes up is another object each time, but equal.
    grown = [replace(history[0]), *history[1:], Message(role="user", content="new", seq=200)]
    second = memo.items("responses", grown, convert)
    assert seen == [grown[-1]]
    assert len(second) == 402 and all(
        a is b for a, b in zip(second[:400], first[:400], strict=True)
    )
    assert second[-2:] == [{"text": "new"}, {"seq": 200}]
    seen.clear()
    assert len(memo.items("openai", grown, convert)) == 402  # another format: its own
    assert len(seen) == 201
    seen.clear()
    edited = [*grown[:10], replace(grown[10], content="edited"), *grown[11:]]
    assert memo.items("responses", edited, convert)[20] == {"text": "edited"}
    assert len(seen) == 201  # a changed message: converted from the start again


def test_an_unanswered_call_keeps_the_memo_before_it_and_its_late_result_moves_up():
    memo = HistoryMemo()
    window = [
        Message(role="user", content="go"),
        Message(role="assistant", content="", tool_calls=(ToolCall(id="a", name="bash"),)),
        Message(role="user", content="meanwhile"),
    ]
    first = check(window, memo)
    assert "no result" in orjson.dumps(first).decode()
    assert len(memo.paired.inputs) == 1  # the call waits: what follows it is not final
    window.append(Message(role="tool", content="late", tool_call_id="a"))
    second = check(window, memo)
    assert "no result" not in orjson.dumps(second).decode()


def test_a_memo_from_another_history_is_not_used():
    memo = HistoryMemo()
    check([Message(role="user", content="one"), Message(role="assistant", content="two")], memo)
    body = check(
        [Message(role="user", content="three"), Message(role="assistant", content="four")], memo
    )
    assert "one" not in orjson.dumps(body).decode()


def test_the_marked_turn_stays_the_builds_own_when_system_turns_follow_it():
    """The newest user or assistant turn is marked: never a remembered, shared one."""
    memo = HistoryMemo()
    window = [Message(role="user", content="q"), Message(role="assistant", content="a")]
    for i in range(5):
        window += [Message(role="user", content=f"u{i}"), Message(role="system", content=f"s{i}")]
        body = check(window, memo, mid_system=True)
        (marked,) = [t for t in body["messages"] if f'"u{i}"' in orjson.dumps(t).decode()]
        assert "cache_control" in orjson.dumps(marked).decode()
    assert all("cache_control" not in orjson.dumps(t).decode() for t in memo.turns.closed)


def conversation(n: int) -> list[Message]:
    out = []
    for i in range(n):
        out += [
            Message(role="user", content=as_string(f"question {i}"), seq=2 * i + 1),
            Message(role="assistant", content=f"answer {i}", seq=2 * i + 2),
        ]
    return [*out, Message(role="user", content="next", seq=2 * n + 1)]


def sent(body: dict) -> str:
    return orjson.dumps(body["messages"]).decode()


def test_an_edit_of_a_remembered_message_is_sent():
    memo, window = HistoryMemo(), conversation(50)
    check(window, memo)
    window[10] = replace(window[10], view="[trimmed]", view_state="trimmed")
    assert "[trimmed]" in sent(check(window, memo))


def test_a_compaction_sends_the_new_window_only():
    memo, window = HistoryMemo(), conversation(50)
    check(window, memo)
    body = check(window[60:], memo, summary="what happened before")
    assert "question 0" not in sent(body) and "question 30" in sent(body)


def test_a_window_read_again_builds_the_same_body():
    memo, window = HistoryMemo(), conversation(50)
    first = check(window, memo)
    assert check([replace(m) for m in window], memo) == first


def test_a_divergence_after_the_remembered_prefix_is_sent():
    memo, window = HistoryMemo(), conversation(50)
    check(window, memo)
    diverged = [*window[:40], Message(role="user", content="another question", seq=41)]
    body = check(diverged, memo)
    assert "another question" in sent(body) and "question 30" not in sent(body)
