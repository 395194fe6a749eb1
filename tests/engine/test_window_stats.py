"""engine.window_stats: figures extended message by message equal those of one pass."""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from contextsvc.engine.messages import Message
from contextsvc.engine.window_stats import LARGEST, window_stats

STATES = ("full", "full", "full", "trimmed", "cut", "cleared")

messages_st = st.lists(
    st.builds(
        lambda role, tokens, state, seq: Message(
            role=role, content="x", token_count=tokens, view_state=state, seq=seq
        ),
        st.sampled_from(("user", "assistant", "tool")),
        st.one_of(st.none(), st.integers(0, 50)),  # few values: many ties
        st.sampled_from(STATES),
        st.integers(1, 10_000),
    ),
    max_size=80,
)


def _one_pass(messages: list[Message]) -> tuple:
    tokens = [m.token_count or 0 for m in messages]
    largest = heapq.nlargest(LARGEST, range(len(tokens)), key=tokens.__getitem__)
    states: dict[str, list[int]] = {}
    for m, t in zip(messages, tokens, strict=True):
        if m.view_state != "full":
            entry = states.setdefault(m.view_state, [0, 0])
            entry[0] += 1
            entry[1] += t
    outputs = sum(t for m, t in zip(messages, tokens, strict=True) if m.role == "tool")
    return largest, {k: tuple(v) for k, v in states.items()}, outputs, sum(tokens)


def _figures(stats) -> tuple:
    return (
        [i for i, _ in stats.largest],
        {s: (n, t) for s, n, t in stats.placeholders},
        stats.outputs_tokens,
        stats.tokens,
    )


@given(messages_st, st.lists(st.integers(0, 80), max_size=6))
def test_extending_in_steps_equals_one_pass(messages, cuts):
    stats = None
    for cut in sorted(c for c in cuts if c <= len(messages)):
        stats = window_stats(messages[:cut], stats)
        assert stats.count == cut
    stats = window_stats(messages, stats)
    assert stats.count == len(messages)
    assert _figures(stats) == _one_pass(messages)
    assert [m for _, m in stats.largest] == stats.largest_messages


def test_ties_keep_window_order_and_the_list_stops_at_the_limit():
    messages = [Message(role="user", token_count=5, seq=i) for i in range(LARGEST + 5)]
    stats = window_stats(messages[:3])
    stats = window_stats(messages, stats)
    assert [m.seq for m in stats.largest_messages] == list(range(LARGEST))


def test_figures_of_a_longer_window_are_not_reused_for_a_shorter_one():
    messages = [Message(role="tool", token_count=i, seq=i) for i in range(10)]
    longer = window_stats(messages)
    assert window_stats(messages[:4], longer).outputs_tokens == 0 + 1 + 2 + 3
    assert window_stats(messages[:4], longer).tokens == 0 + 1 + 2 + 3


def test_runs_extended_equal_one_pass_and_break_on_state_or_gap():
    states = ["full", "full", "trimmed", "trimmed", "full", "cleared", "full", "full"]
    seqs = [1, 2, 3, 4, 5, 6, 9, 10]  # 7 and 8 are not live
    messages = [
        Message(
            role="tool" if s != "full" else "user", content="x", seq=q, token_count=q, view_state=s
        )
        for s, q in zip(states, seqs, strict=True)
    ]
    whole = window_stats(messages)
    assert whole.runs == (
        (1, 2, "full", 3),
        (3, 4, "trimmed", 7),
        (5, 5, "full", 5),
        (6, 6, "cleared", 6),
        (9, 10, "full", 19),
    )
    stats = None
    for cut in range(1, len(messages) + 1):
        stats = window_stats(messages[:cut], stats)
    assert stats.runs == whole.runs
