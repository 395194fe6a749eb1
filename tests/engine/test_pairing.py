"""The one tool-call pairing rule (``engine.pairing``) and the modules that read it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.pairing import pair_tool_calls
from contextsvc.engine.strategies.cuts import open_call_floor
from contextsvc.engine.turns import unsafe_cuts
from contextsvc.engine.wellformed import NO_RESULT_TEXT, well_formed


def user(text: str = "q") -> Message:
    return Message(role="user", content=text)


def call(*ids: str) -> Message:
    return Message(role="assistant", tool_calls=tuple(ToolCall(id=i, name="t") for i in ids))


def result(call_id: str, text: str = "out") -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, name="t")


def test_each_result_answers_its_call():
    history = [user(), call("a", "b"), result("b"), result("a"), user()]
    pairing = pair_tool_calls(history)
    assert pairing.result_of == {(1, 1): 2, (1, 0): 3}
    assert pairing.call_of == {2: (1, 1), 3: (1, 0)}
    assert pairing.open_calls() == []


def test_unanswered_calls_stay_open_in_history_order():
    history = [user(), call("a"), user(), call("b", "c"), result("c")]
    assert pair_tool_calls(history).open_calls() == [(1, 0), (3, 0)]


def test_a_result_before_its_call_or_without_one_is_an_orphan():
    history = [result("a"), call("a"), result("x")]
    pairing = pair_tool_calls(history)
    assert pairing.call_of == {}
    assert pairing.open_calls() == [(1, 0)]


def test_a_reused_id_pairs_with_the_nearest_open_call_first():
    # An id repeated while its call is open (old transcripts only: appends
    # refuse that now): the first result answers the newer call, the second
    # one the older call still open.
    history = [call("x"), user(), call("x"), result("x", "first"), result("x", "second")]
    pairing = pair_tool_calls(history)
    assert pairing.result_of == {(2, 0): 3, (0, 0): 4}
    assert pairing.open_calls() == []


def test_cuts_floor_and_provider_view_read_the_same_pairs():
    history = [call("x"), user(), call("x"), result("x", "first"), result("x", "second")]
    # The older call and its (late) result may not be cut apart …
    assert unsafe_cuts(history)[1:5] == [True, True, True, True]
    # … nothing waits, so no floor …
    assert open_call_floor(history) == len(history)
    # … and the provider view sends that result with that call, not as an orphan.
    sent = well_formed(history)
    texts = [m.text for m in sent if m.role == "tool"]
    assert texts == ["second", "first"]
    assert NO_RESULT_TEXT not in texts


ids = st.sampled_from(["a", "b", "c"])
messages = st.one_of(
    st.just(user()),
    st.lists(ids, min_size=1, max_size=2).map(lambda xs: call(*xs)),
    ids.map(result),
)


@given(st.lists(messages, max_size=14))
def test_property_pairs_are_one_to_one_and_point_backwards(history):
    pairing = pair_tool_calls(history)
    assert len(set(pairing.result_of.values())) == len(pairing.result_of)
    assert {r: c for c, r in pairing.result_of.items()} == pairing.call_of
    for (i, k), r in pairing.result_of.items():
        assert i < r
        assert history[i].tool_calls[k].id == history[r].tool_call_id
    calls = {(i, k) for i, m in enumerate(history) for k in range(len(m.tool_calls))}
    assert set(pairing.result_of) | set(pairing.open_calls()) == calls
    assert not set(pairing.result_of) & set(pairing.open_calls())
