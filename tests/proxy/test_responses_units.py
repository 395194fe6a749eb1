"""A Responses input is grouped into units again only from the last unit it shares with the
conversation's previous input (``responses_body.client_units``): the result is always
``group_units`` of the whole input."""

from __future__ import annotations

import copy
import random

import pytest

from contextsvc.engine.providers.common import ConversionError
from contextsvc.engine.providers.openai_responses import group_units, normalized_input
from proxy.providers import responses_body
from proxy.providers.responses_body import client_units, regrouped


def item(kind: str, n: int) -> dict:
    call = f"call_{n}"
    return {
        "user": {"role": "user", "content": f"turn {n}"},
        "text": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"r{n}"}]},
        "reasoning": {"type": "reasoning", "id": f"rs_{n}", "summary": []},
        "call": {"type": "function_call", "call_id": call, "name": "exec", "arguments": "{}"},
        "output": {"type": "function_call_output", "call_id": call, "output": f"out {n}"},
        "developer": {"role": "developer", "content": "note"},
    }[kind]  # fmt: skip


def conversation(kinds: list[str]) -> list[dict]:
    return [item(kind, n) for n, kind in enumerate(kinds)]


def check(items: list[dict], previous):
    units, starts = regrouped(items, previous)
    assert units == group_units(items)
    assert starts == [sum(len(u["items"]) for u in units[:i]) for i in range(len(units))]
    return items, units, starts


def test_a_grown_input_reuses_every_whole_unit_and_equals_a_full_grouping():
    first = conversation(["user", *["reasoning", "call", "output"] * 40, "text"])
    kept = check(first, None)
    grown = [*first, item("reasoning", 900), item("text", 901), item("user", 902)]
    items, units, _ = check(grown, kept)
    # The closing assistant turn grew (reasoning and text after the text): grouped again.
    assert units[-2]["items"][-2:] == grown[-3:-1]
    assert units[5] is kept[1][5]  # a whole earlier unit is the one grouped before


def test_a_last_unit_that_nothing_joins_is_kept_too():
    first = conversation(["user", *["call", "output"] * 40, "user"])
    kept = check(first, None)
    items, units, _ = check([*first, item("text", 500), item("user", 501)], kept)
    assert units[len(kept[1]) - 1] is kept[1][-1]  # the user turn: an assistant one follows
    again = check([*items, item("reasoning", 502)], (items, units, _))
    assert again[1][-2] is units[-1]
    ending = conversation(["user", *["call", "output"] * 40, "text"])
    before = check(ending, None)
    joined = check([*ending, item("reasoning", 600)], before)  # joins the assistant turn
    assert len(joined[1]) == len(before[1]) and joined[1][-1] is not before[1][-1]
    assert joined[1][-1]["items"] == [ending[-1], item("reasoning", 600)]


def test_an_edited_or_shortened_input_still_equals_a_full_grouping():
    first = conversation(["user", *["call", "output", "text", "user"] * 30])
    kept = check(first, None)
    edited = copy.deepcopy(first)
    edited[10] = item("developer", 10)
    check(edited, kept)
    check(first[:50], kept)  # a client that compacted itself: shorter
    check([item("user", 0)] + first[1:], kept)  # equal items, other objects: grouped again
    check(first, check(first, kept))  # nothing new


def test_random_growth_and_edits_always_equal_a_full_grouping():
    rng = random.Random(7)
    kinds = ["user", "text", "reasoning", "call", "output", "developer"]
    items = conversation([rng.choice(kinds) for _ in range(80)])
    kept = check(items, None)
    for step in range(200):
        items = list(items)
        if rng.random() < 0.2 and len(items) > 10:
            cut = rng.randrange(1, len(items))
            items[cut] = item(rng.choice(kinds), 1000 + step)
        if rng.random() < 0.1:
            items = items[: rng.randrange(1, len(items) + 1)]  # the client compacted itself
        items += [item(rng.choice(kinds), 2000 + step * 10 + k) for k in range(rng.randrange(0, 4))]
        kept = check(items, kept)


@pytest.fixture
def fresh_memo(monkeypatch):
    monkeypatch.setattr(responses_body, "_GROUPED", type(responses_body._GROUPED)(8))


def test_client_units_reuses_the_previous_grouping_of_the_same_first_item(fresh_memo):
    items = conversation(["user", *["call", "output"] * 40])
    first = client_units({"instructions": "x", "input": [item("developer", 0), *items]})
    grown = client_units({"input": [item("developer", 0), *items, item("text", 99)]})
    assert grown == group_units([*items, item("text", 99)])
    assert grown[3] is first[3]
    other = client_units({"input": copy.deepcopy(items)})  # equal items, other objects
    assert other == first and other[3] is not first[3]


def test_an_input_is_checked_again_only_past_the_items_an_earlier_call_accepted():
    """``input_items``: the items that are the last accepted input's very objects are not
    checked again; any other item is, wherever it stands."""
    history = conversation(["user", "text"] * 50)
    assert responses_body.input_items({"input": history}) == history
    bad_role = {"role": "tool", "content": "x"}
    with pytest.raises(ConversionError) as new_bad:
        responses_body.input_items({"input": [*history, bad_role]})
    assert new_bad.value.path == "input.100.role"
    # The same first object, another (bad) object further in: checked, not skipped.
    swapped = [*history[:50], "not an object", *history[51:]]
    with pytest.raises(ConversionError) as inside:
        responses_body.input_items({"input": swapped})
    assert inside.value.path == "input.50"
    # A copy of the history (other objects, equal) is checked whole, and accepted.
    assert responses_body.input_items({"input": copy.deepcopy(history)}) == history


def test_normalized_input_checks_only_the_items_after_those_said_checked():
    items = [{"role": "tool", "content": "accepted earlier"}, {"role": "user", "content": "new"}]
    assert normalized_input({"input": items}, checked=1) is items
    with pytest.raises(ConversionError) as error:
        normalized_input({"input": items})
    assert error.value.path == "input.0.role"


def test_a_grown_input_is_checked_from_its_first_new_item(monkeypatch):
    asked = []

    def recording(body, *, checked=0):
        asked.append(checked)
        return normalized_input(body, checked=checked)

    monkeypatch.setattr(responses_body.openai_responses, "normalized_input", recording)
    history = conversation(["user", "text"] * 50)
    responses_body.input_items({"input": history})
    grown = [*history, item("user", 100)]
    responses_body.input_items({"input": grown})
    responses_body.input_items({"input": grown})  # the same call's second reader
    assert asked == [0, 100, 101]
