"""A list's leading shared objects are counted once (``proxy.object_prefix``): every answer is
the item-by-item count, and a call's memos find it known instead of counting again."""

from __future__ import annotations

import random

import orjson
import pytest
from django.test import RequestFactory

from contextsvc.body_gate import BodyRefused
from proxy import gate, gate_fields, object_prefix
from proxy.body_reuse import BodyReuse
from proxy.object_prefix import counted, note, shared_objects, snapshot
from proxy.providers import ANTHROPIC
from proxy.selectors import client_chains


@pytest.fixture
def counts(monkeypatch):
    """The item-by-item counts made, as (len(old), len(new)), with fresh memos."""
    made = []

    def recording(old, new):
        made.append((len(old), len(new)))
        return counted(old, new)

    monkeypatch.setattr(object_prefix, "counted", recording)
    for name in ("_SNAPSHOTS", "_COUNTS"):
        monkeypatch.setattr(object_prefix, name, type(getattr(object_prefix, name))(64))
    return made


def test_every_answer_is_the_item_by_item_count(counts):
    rng = random.Random(3)
    pool = [{"n": n} for n in range(40)]
    for _ in range(300):
        old = rng.choices(pool, k=rng.randrange(0, 30))
        new = [*old[: rng.randrange(0, len(old) + 1)], *rng.choices(pool, k=rng.randrange(0, 5))]
        frozen = snapshot(old)
        for pair in ((old, new), (frozen, new), (frozen, old), (old, new)):
            expected = sum(1 for _ in zip(*pair, strict=False)) if pair[1] is old else None
            got = shared_objects(*pair)
            assert got == counted(*pair)
            if expected is not None:
                assert got == expected  # a list's own snapshot shares all of it


def test_a_count_is_made_once_per_pair_and_again_when_a_list_grew(counts):
    old, new = [{"a": 1}, {"b": 2}], []
    new.extend(old)
    assert shared_objects(old, new) == 2 and shared_objects(old, new) == 2
    assert counts == [(2, 2)]
    new.append({"c": 3})  # grown: its length no longer that of the pair remembered
    assert shared_objects(old, new) == 2
    assert counts == [(2, 2), (2, 3)]


def test_snapshot_is_one_tuple_per_unchanged_list():
    items = [{"a": 1}, {"b": 2}]
    frozen = snapshot(items)
    assert frozen == tuple(items) and snapshot(items) is frozen and snapshot(frozen) is frozen
    items.append({"c": 3})
    assert snapshot(items) is not frozen and snapshot(items) == tuple(items)


def test_a_note_is_taken_only_where_a_count_would_find_the_same():
    shared = {"a": 1}
    old, new = (shared, {"b": 2}), [shared, {"b": 2}]
    note(old, new, 1)  # new[1] is another object: a count stops there too
    assert shared_objects(old, new) == 1
    same = (shared, shared)
    note(same, [shared, shared], 1)  # wrong (the next item is the same object): not taken
    assert shared_objects(same, [shared, shared]) == 2
    note(old, [shared], 5)  # more than either holds: not taken
    assert shared_objects(old, [shared]) == 1


def _request(raw: bytes):
    return RequestFactory().post(
        "/proxy/anthropic/v1/messages",
        data=raw,
        content_type="application/json",
        headers={"x-contextsvc-session": "s"},
    )


def test_a_reused_body_s_memos_count_nothing_again(monkeypatch, counts):
    """The gate tells how many messages it reused; the chain and digest memos then find the
    count known (and hold the same frozen copy): no item-by-item pass over the history."""
    monkeypatch.setattr(gate, "_REUSE", BodyReuse(slots=8, max_bytes=2**24, least=4))
    history = [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(100)]
    bodies = []
    for n in range(3):  # the first parsed whole, the second scans it, the third reuses
        history = [*history, {"role": ("user", "assistant")[n % 2], "content": f"n{n}"}]
        counts.clear()
        bodies.append(
            gate.read(_request(orjson.dumps({"model": "m", "messages": history})), ANTHROPIC)
        )
        chains = client_chains(None, bodies[-1]["messages"])
    assert bodies[2]["messages"][5] is bodies[0]["messages"][5]  # reused
    assert [c for c in counts if c[0] >= 64] == []
    assert chains.at(len(history)) == client_chains(None, [dict(m) for m in history]).at(
        len(history)
    )
    # A list the gate did not make, with the same leading objects: counted, once.
    counts.clear()
    other = [*bodies[2]["messages"], {"role": "user", "content": "x"}]
    client_chains(None, other)
    assert counts == [(len(history), len(other))]


@pytest.mark.parametrize("differ", [None, 0, 1, 500, 967, 968, 990, 999])
def test_counted_finds_the_first_pair_that_is_not_the_same_object(differ):
    """Near the end (one by one) or earlier (in C), and with either list the shorter."""
    old = [{"n": n} for n in range(1000)]
    new = list(old)
    if differ is not None:
        new[differ] = dict(new[differ])  # equal, another object
    expected = 1000 if differ is None else differ
    assert counted(old, new) == expected
    assert counted(old, [*new, {"n": 1000}]) == expected
    assert counted(old, new[:980]) == min(expected, 980)
    assert counted(old[:980], new) == min(expected, 980)


def test_the_gate_checks_only_the_messages_it_did_not_take_from_an_accepted_body(
    monkeypatch, counts
):
    """``accepted``: the messages the gate reused passed its rules with the previous body;
    the rest are checked, and a bad one is named by its index in the whole history. What
    the gate tells of a body it refuses is held by nothing once it answered."""
    monkeypatch.setattr(gate, "_REUSE", BodyReuse(slots=8, max_bytes=2**24, least=4))
    history = [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(100)]
    for n in range(2):
        history = [*history, {"role": "user", "content": f"n{n}"}]
        gate.read(_request(orjson.dumps({"model": "m", "messages": history})), ANTHROPIC)
    held = (len(object_prefix._SNAPSHOTS), len(object_prefix._COUNTS))
    raw = orjson.dumps({"model": "m", "messages": [*history, "not an object"]})
    with pytest.raises(BodyRefused) as refused:
        gate.read(_request(raw), ANTHROPIC)
    assert refused.value.field == f"messages.{len(history)}"
    assert (len(object_prefix._SNAPSHOTS), len(object_prefix._COUNTS)) == held
    told = [{"a": 1}, "trusted", {"b": 2}, {"c": 3}, 5]
    with object_prefix.accepted_within(told, 3), pytest.raises(BodyRefused) as past:
        assert object_prefix.accepted(told) == 3 and object_prefix.accepted(list(told)) == 0
        gate_fields.objects(told, "messages")
    assert past.value.field == "messages.4"  # index 1 was told checked; 4 was not
    assert object_prefix.accepted(told) == 0  # only while the gate checks
