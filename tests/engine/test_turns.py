"""Turns and safe cuts (docs/concepts/context-build.md#safe-cuts, parseTurnBoundaries /
findSafeBoundary)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.strategies.cuts import snap_cut
from contextsvc.engine.turns import (
    find_safe_boundary,
    is_safe_boundary,
    last_turns_start,
    parse_turn_boundaries,
    turn_spans,
    unsafe_cuts,
)


def is_safe_cut(history: list[Message], index: int) -> bool:
    """Does cutting at ``index`` keep every tool call on the same side as its results?"""
    if not 0 <= index <= len(history):
        raise EngineValidationError(
            f"Cut index {index} is outside 0..{len(history)}", field="index"
        )
    if index == 0 or index == len(history):
        return True
    return not unsafe_cuts(history)[index]


def user(text: str = "q") -> Message:
    return Message(role="user", content=text)


def say(text: str = "a") -> Message:
    return Message(role="assistant", content=text)


def call(*ids: str) -> Message:
    return Message(role="assistant", tool_calls=tuple(ToolCall(id=i, name="t") for i in ids))


def result(call_id: str) -> Message:
    return Message(role="tool", content="out", tool_call_id=call_id, name="t")


# Three turns:
#   0 user | 1 call(a,b) 2 result(a) 3 result(b) 4 say
#   5 user 6 say
#   7 user 8 call(c) 9 result(c)
HISTORY = [
    user(), call("a", "b"), result("a"), result("b"), say(),
    user(), say(),
    user(), call("c"), result("c"),
]  # fmt: skip


def test_turn_boundaries_are_user_messages_spec003():
    assert parse_turn_boundaries(HISTORY) == [0, 5, 7]


def test_history_without_system_message_or_leading_user_spec003():
    # After a compaction the kept tail may start mid-turn; nothing assumes a system message.
    history = [say(), result("x"), user(), say()]
    assert parse_turn_boundaries(history) == [2]
    assert turn_spans(history) == [(0, 2), (2, 4)]
    assert parse_turn_boundaries([]) == []


def test_cut_between_call_and_result_is_unsafe():
    assert is_safe_cut(HISTORY, 5)
    assert not is_safe_cut(HISTORY, 2)  # call(a,b) | result(a)
    assert not is_safe_cut(HISTORY, 3)  # result(a) | result(b): b's call is on the left
    assert is_safe_cut(HISTORY, 4)  # all results delivered; mid-turn but no orphan
    assert not is_safe_cut(HISTORY, 9)
    assert is_safe_cut(HISTORY, 0) and is_safe_cut(HISTORY, len(HISTORY))


def test_is_safe_cut_rejects_out_of_range_index():
    with pytest.raises(EngineValidationError):
        is_safe_cut(HISTORY, len(HISTORY) + 1)
    with pytest.raises(EngineValidationError):
        is_safe_cut(HISTORY, -1)


def test_reused_tool_call_id_pairs_with_latest_call():
    # Some providers reuse ids across turns; an old call must not pair with a new result.
    history = [user(), call("x"), result("x"), user(), call("x"), result("x")]
    assert is_safe_cut(history, 3)
    assert not is_safe_cut(history, 5)


def test_user_message_between_call_and_result_is_not_a_safe_boundary():
    # An interjected user message sits inside a call/result pair: snapping must skip it.
    history = [
        user(),
        say(),
        user(),
        call("k"),
        user("interrupt"),
        result("k"),
        say(),
        user(),
        say(),
    ]
    assert not is_safe_cut(history, 4)
    assert find_safe_boundary(history, 4) == 2
    assert find_safe_boundary(history, 5) == 2
    assert find_safe_boundary(history, 6) == 2


def test_find_safe_boundary_prefers_boundary_at_or_before_target_spec003():
    assert find_safe_boundary(HISTORY, 5) == 5
    assert find_safe_boundary(HISTORY, 6) == 5
    assert find_safe_boundary(HISTORY, 9) == 7
    assert find_safe_boundary(HISTORY, 10) == len(HISTORY)  # the end itself


def test_find_safe_boundary_falls_forward_when_nothing_before():
    # Targets inside the first turn: no boundary above 0 at or before → the next one.
    assert find_safe_boundary(HISTORY, 1) == 5
    assert find_safe_boundary(HISTORY, 3) == 5


def test_spec003_turn_boundaries_find_safe_boundary_clamps_out_of_range_targets_to_the_ends():
    # Before the start is the start; at or past the end is the end; never an error.
    assert find_safe_boundary(HISTORY, -5) == 0
    assert find_safe_boundary(HISTORY, 0) == 0
    assert find_safe_boundary(HISTORY, len(HISTORY)) == len(HISTORY)
    assert find_safe_boundary(HISTORY, 1_000) == len(HISTORY)
    assert find_safe_boundary([], 3) == 0
    assert find_safe_boundary([], -3) == 0


def test_spec003_turn_boundaries_no_user_message_leaves_the_target_unchanged():
    no_turns = [say(), call("x"), result("x"), say(), say()]
    for target in range(1, len(no_turns)):
        assert find_safe_boundary(no_turns, target) == target
    assert find_safe_boundary([say(), say()], 1) == 1
    assert find_safe_boundary(no_turns, 99) == len(no_turns)


def test_spec003_turn_boundaries_only_turn_starts_are_safe():
    # 4 is mid-turn (an assistant text after every result came back): no orphan,
    # but not a turn start, so not a safe boundary.
    assert not is_safe_boundary(HISTORY, 4)
    assert not is_safe_boundary(HISTORY, 1)
    assert is_safe_boundary(HISTORY, 5) and is_safe_boundary(HISTORY, 7)
    assert find_safe_boundary(HISTORY, 4) == 5  # not 4: snaps to the next turn start
    # The ends are safe, and out-of-range positions count as the ends.
    assert is_safe_boundary(HISTORY, 0) and is_safe_boundary(HISTORY, len(HISTORY))
    assert is_safe_boundary(HISTORY, -3) and is_safe_boundary(HISTORY, len(HISTORY) + 3)


def test_spec003_turn_boundaries_interjected_user_message_is_not_a_safe_boundary():
    history = [user(), say(), user(), call("k"), user("interrupt"), result("k"), say()]
    assert not is_safe_boundary(history, 4)
    assert is_safe_boundary(history, 2)


def test_find_safe_boundary_returns_zero_when_nothing_can_be_cut_spec003():
    # The single-turn case (docs/concepts/compaction.md#single-turn-fallback): one user message and
    # a massive tool response.
    single = [user(), call("big"), result("big"), say()]
    assert find_safe_boundary(single, 2) == 0


def test_snap_cut_never_cuts_a_history_without_turns_spec003():
    # findSafeBoundary hands the target back; a compaction still only cuts at a turn start.
    no_turns = [say(), call("x"), result("x"), say()]
    assert snap_cut(no_turns, 2) == 0
    assert snap_cut(no_turns, 3) == 0
    assert snap_cut(no_turns, len(no_turns)) == len(no_turns)


def test_turn_spans_cover_history():
    assert turn_spans(HISTORY) == [(0, 5), (5, 7), (7, 10)]
    assert turn_spans([]) == []
    assert turn_spans([say(), say()]) == [(0, 2)]


def test_last_turns_start():
    assert last_turns_start(HISTORY, 1) == 7
    assert last_turns_start(HISTORY, 2) == 5
    assert last_turns_start(HISTORY, 3) == 0
    assert last_turns_start(HISTORY, 4) == 0  # fewer turns than asked: keep everything
    assert last_turns_start(HISTORY, 0) == len(HISTORY)
    # A leading non-user span is not a turn: with exactly n turns it is cut too.
    assert last_turns_start([say(), user(), say()], 1) == 1
    with pytest.raises(EngineValidationError):
        last_turns_start(HISTORY, -1)


# --- properties -------------------------------------------------------------


@st.composite
def well_formed_histories(draw) -> list[Message]:
    """user / assistant(tool_calls) / matching tool results (any order) / assistant text."""
    ids = (f"call_{n}" for n in itertools.count())
    history: list[Message] = []
    if draw(st.booleans()):
        history.append(say("leading tail of a compacted window"))
    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        history.append(user())
        for _ in range(draw(st.integers(min_value=0, max_value=3))):
            batch = [next(ids) for _ in range(draw(st.integers(min_value=1, max_value=3)))]
            history.append(call(*batch))
            history.extend(result(i) for i in draw(st.permutations(batch)))
        if draw(st.booleans()):
            history.append(say())
    if history and draw(st.booleans()):
        # A pending call at the end (a final call may have no result, workloads README).
        history.append(call(next(ids)))
    return history


def _oracle_safe(history: list[Message], index: int) -> bool:
    """Brute force for histories with unique ids: no call on one side, result on the other."""
    left, right = history[:index], history[index:]
    calls = lambda part: {c.id for m in part for c in m.tool_calls}  # noqa: E731
    results = lambda part: {m.tool_call_id for m in part if m.role == "tool"}  # noqa: E731
    return not (calls(left) & results(right)) and not (calls(right) & results(left))


@given(history=well_formed_histories(), data=st.data())
def test_find_safe_boundary_always_returns_a_safe_turn_start(history, data):
    target = data.draw(st.integers(min_value=-2, max_value=len(history) + 2))
    cut = find_safe_boundary(history, target)
    assert 0 <= cut <= len(history)
    if not any(m.role == "user" for m in history):
        assert cut == min(max(target, 0), len(history))
        return
    assert is_safe_cut(history, cut)
    assert _oracle_safe(history, cut)
    assert cut in (0, len(history)) or history[cut].role == "user"
    assert is_safe_boundary(history, cut)


@given(history=well_formed_histories())
def test_is_safe_cut_matches_brute_force(history):
    for index in range(len(history) + 1):
        assert is_safe_cut(history, index) == _oracle_safe(history, index)


@given(history=well_formed_histories(), data=st.data())
def test_find_safe_boundary_prefers_at_or_before(history, data):
    target = data.draw(st.integers(min_value=1, max_value=max(1, len(history) - 1)))
    cut = find_safe_boundary(history, target)
    if not any(m.role == "user" for m in history):
        assert cut == min(target, len(history))
        return
    if target >= len(history):
        assert cut == len(history)  # at or past the end: the end
        return
    safe_starts = [b for b in parse_turn_boundaries(history) if b > 0 and _oracle_safe(history, b)]
    at_or_before = [b for b in safe_starts if b <= target]
    after = [b for b in safe_starts if b > target]
    expected = at_or_before[-1] if at_or_before else (after[0] if after else 0)
    assert cut == expected


# Arbitrary (possibly malformed) sequences: interleaved users, orphan results, reused ids.
arbitrary_message = st.one_of(
    st.just(user()),
    st.just(say()),
    st.lists(st.sampled_from("abc"), min_size=1, max_size=2).map(lambda ids: call(*ids)),
    st.sampled_from("abcz").map(result),
)


@given(history=st.lists(arbitrary_message, max_size=25), data=st.data())
def test_find_safe_boundary_is_safe_on_malformed_histories(history, data):
    target = data.draw(st.integers(min_value=0, max_value=len(history)))
    cut = find_safe_boundary(history, target)
    if any(m.role == "user" for m in history):
        assert is_safe_cut(history, cut)
        assert cut in (0, len(history)) or history[cut].role == "user"
    snapped = snap_cut(history, target)
    assert is_safe_boundary(history, snapped) and is_safe_cut(history, snapped)
    spans = turn_spans(history)
    # Spans tile the history exactly.
    assert [i for s, e in spans for i in range(s, e)] == list(range(len(history)))
