"""A long history is parsed from where it stopped matching the previous request (``body_reuse``).

Every reparse is compared with a full parse of the same bytes: the same
values and key order, or no reuse at all (the body is then parsed whole and
refused, if it is, with the full parse's own error).
"""

from __future__ import annotations

import json
import random

import orjson
import pytest
from django.test import RequestFactory

from contextsvc.body_gate import BodyRefused
from proxy import body_reuse, gate
from proxy.body_reuse import BodyReuse, element_ends, history_start, kept, reparse
from proxy.providers import ANTHROPIC

LEAST = 4


def history(n: int, marker_at: int | None = None) -> list[dict]:
    """A Claude Code-like history: user text, tool calls, results; the cache marker on one turn."""
    out: list[dict] = []
    for i in range(n):
        if i % 3 == 0:
            block = {"type": "text", "text": f'step {i}: look at "a.py" \\ ] }} {{ [ \u00e9\u4e2d'}
            out.append({"role": "user", "content": [block]})
        elif i % 3 == 1:
            call = {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": "ls"}}
            out.append({"role": "assistant", "content": [call]})
        else:
            result = {"type": "tool_result", "tool_use_id": f"t{i - 1}", "content": "x\n" * 5}
            out.append({"role": "user", "content": [result]})
    if marker_at is not None:
        out[marker_at]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def deep(levels: int) -> dict:
    value: object = "bottom"
    for _ in range(levels):
        value = {"nested": [value]}
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "d", "name": "D", "input": value}],
    }


SERIALISERS = {
    "compact": orjson.dumps,
    "python sdk": lambda body: json.dumps(body).encode(),
    "indented": lambda body: json.dumps(body, indent=2, ensure_ascii=False).encode(),
}


def body(messages: list[dict], *, order: str = "messages first") -> dict:
    fields = {"model": "claude-opus-4-5", "max_tokens": 100}
    tail = {"system": "be brief", "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}
    if order == "messages last":
        return {**fields, **tail, "messages": messages}
    return {**fields, "messages": messages, **tail, "stream": True}


def reused(first: bytes, second: bytes) -> tuple[dict, int] | None:
    previous = kept(first, orjson.loads(first), "messages")
    assert previous is not None
    out = reparse(second, "messages", previous, LEAST)
    if out is None:
        return None
    parsed, entry, taken = out
    assert list(parsed) == list(orjson.loads(second))  # the key order of a full parse
    assert parsed == orjson.loads(second)
    shared = sum(1 for a, b in zip(previous.messages, parsed["messages"], strict=False) if a is b)
    assert taken == shared
    assert entry.messages == tuple(parsed["messages"])
    assert kept(second, parsed, "messages").ends == entry.ends  # what the next call compares
    return parsed, shared


@pytest.mark.parametrize("serialise", SERIALISERS.values(), ids=SERIALISERS)
@pytest.mark.parametrize("order", ["messages first", "messages last"])
def test_a_grown_history_reuses_every_message_it_shares(serialise, order):
    messages = history(30)
    first = serialise(body(messages, order=order))
    second = serialise(body([*messages, *history(2)], order=order))
    parsed, shared = reused(first, second)
    assert shared == 30
    assert len(parsed["messages"]) == 32


@pytest.mark.parametrize("serialise", SERIALISERS.values(), ids=SERIALISERS)
def test_a_moved_cache_marker_reuses_the_messages_before_it(serialise):
    first = serialise(body(history(30, marker_at=29)))
    second = serialise(body(history(33, marker_at=32)))
    parsed, shared = reused(first, second)
    assert shared == 29  # message 29 lost its marker: parsed again
    assert "cache_control" not in parsed["messages"][29]["content"][-1]


def test_nothing_new_and_a_message_deeper_than_one_match_still_equal_a_full_parse():
    messages = [*history(10), deep(20), *history(3)]
    first = orjson.dumps(body(messages))
    assert reused(first, first)[1] == 14
    grown = orjson.dumps(body([*messages, deep(30), *history(1)]))
    assert reused(first, grown)[1] == 14


def test_an_edited_early_message_or_too_few_shared_ones_parse_whole():
    messages = history(30)
    first = orjson.dumps(body(messages))
    edited = [dict(messages[0], role="assistant"), *messages[1:]]
    assert reused(first, orjson.dumps(body(edited))) is None
    few = [*messages[:3], {"role": "user", "content": "other"}, *messages[4:]]
    assert reused(first, orjson.dumps(body(few))) is None  # 3 shared < LEAST


@pytest.mark.parametrize(
    "after",
    [
        b',"m\\u0065ssages":[]}',  # the history's own name again, escaped: it would win
        b',"messages":[1]}',
        b",}",  # a trailing comma
        b'"system":"x"}',  # no comma
        b"}garbage",
        b',"system":"x"',  # cut short
    ],
)
def test_a_hostile_end_is_never_reparsed(after):
    messages = history(30)
    first = orjson.dumps({"model": "m", "messages": messages})
    grown = orjson.dumps(messages + history(2))
    second = b'{"model":"m","messages":' + grown + after
    assert reused(first, second) is None


def test_a_body_that_names_its_history_twice_is_never_kept():
    messages, other = history(30), history(31)[1:]  # as long: only the bytes tell them apart
    for name in (b'"messages"', b'"m\\u0065ssages"'):
        raw = b'{"model":"m","messages":' + orjson.dumps(messages) + b"," + name + b":"
        raw += orjson.dumps(other) + b"}"
        assert orjson.loads(raw)["messages"] == other  # the second one is read
        assert kept(raw, orjson.loads(raw), "messages") is None
    escaped_first = b'{"m\\u0065ssages":[1],"messages":' + orjson.dumps(messages) + b"}"
    entry = kept(escaped_first, orjson.loads(escaped_first), "messages")
    assert entry is not None and entry.messages == tuple(messages)  # the one read is found


def test_a_hostile_new_message_is_never_reparsed():
    messages = history(30)
    first = orjson.dumps({"model": "m", "messages": messages})
    for new in (b',{"role":"user",]', b',{"role":"user"}}', b",]", b',"\\x"]', b",{]}"):
        second = first[: first.rindex(b"]")] + new + b"}"
        assert reused(first, second) is None


def test_element_ends_and_history_start_read_the_bytes_as_json_does():
    raw = b'{"a":"messages","messages" : [ {"x":"]"} , 1 ,"s" , [[]] ] ,"z":{}}'
    start = history_start(raw, "messages")
    assert raw[start] == ord("[")
    ends, close = element_ends(raw, start)
    assert len(ends) == 4 and raw[close] == ord("]")
    elements, at = [], start + 1
    for end in ends:  # each element's bytes: after the separator, up to its end
        elements.append(orjson.loads(raw[at:end].strip().removeprefix(b",")))
        at = end
    assert elements == [{"x": "]"}, 1, "s", [[]]]
    assert history_start(b'{"a":{"messages":[1]}}', "messages") is None  # not top level


def _request(raw: bytes, session: str = "s1"):
    return RequestFactory().post(
        "/proxy/anthropic/v1/messages",
        data=raw,
        content_type="application/json",
        headers={"x-contextsvc-session": session},
    )


def test_the_gate_reuses_the_previous_body_of_the_same_conversation_only(monkeypatch):
    monkeypatch.setattr(gate, "_REUSE", BodyReuse(slots=8, max_bytes=2**24, least=LEAST))
    messages = history(30)
    first = gate.read(_request(orjson.dumps(body(messages))), ANTHROPIC)
    grown = orjson.dumps(body([*messages, *history(2)]))
    second = gate.read(_request(grown), ANTHROPIC)
    assert second == orjson.loads(grown)
    assert second["messages"][5] is first["messages"][5]
    other = gate.read(_request(grown, session="s2"), ANTHROPIC)
    assert other == second and other["messages"][5] is not first["messages"][5]


def test_the_gate_refuses_a_hostile_continuation_as_a_full_parse_does(monkeypatch):
    monkeypatch.setattr(gate, "_REUSE", BodyReuse(slots=8, max_bytes=2**24, least=LEAST))
    messages = history(30)
    raw = orjson.dumps(body(messages))
    gate.read(_request(raw), ANTHROPIC)
    broken = raw[: raw.rindex(b"]}")] + b",]}"  # a trailing comma in the tools
    with pytest.raises(BodyRefused) as refused:
        gate.read(_request(broken), ANTHROPIC)
    with pytest.raises(BodyRefused) as whole:
        gate.read(_request(broken, session="fresh"), ANTHROPIC)
    assert refused.value.message == whole.value.message
    assert "not valid JSON" in refused.value.message


@pytest.mark.parametrize("where", ["after the shared messages", "anywhere"])
def test_random_damage_is_reparsed_as_a_full_parse_reads_it_or_not_at_all(where):
    """Bytes flipped, dropped or inserted: a reparse either gives exactly the full parse's
    body or nothing (the body is then parsed whole)."""
    rng = random.Random(11)
    messages = history(30)
    first = orjson.dumps(body(messages))
    previous = kept(first, orjson.loads(first), "messages")
    grown = orjson.dumps(body([*messages, *history(3)]))
    tail_from = previous.ends[-1] if where == "after the shared messages" else 0
    alphabet = b'{}[],:"\\ 0123456789.eE+-tfnrulsa\x00\xff'
    reparsed = 0
    for _ in range(3000):
        raw = bytearray(grown)
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(tail_from, len(raw))
            action = rng.randrange(3)
            if action == 0:
                raw[at] = rng.choice(alphabet)
            elif action == 1:
                del raw[at]
            else:
                raw.insert(at, rng.choice(alphabet))
        raw = bytes(raw)
        out = reparse(raw, "messages", previous, LEAST)
        try:
            whole = orjson.loads(raw)
        except orjson.JSONDecodeError:
            assert out is None
            continue
        if out is not None:
            reparsed += 1
            assert out[0] == whole and list(out[0]) == list(whole)
    assert reparsed > 100  # damage inside strings and numbers still parses: reused


def test_a_body_is_scanned_only_when_its_conversation_comes_again(monkeypatch):
    """Where the messages end is found when the slot's next request comes: a client whose
    first bytes change on every call (a new slot each time) costs no scan."""
    scans = []
    real = body_reuse.history_start
    monkeypatch.setattr(body_reuse, "history_start", lambda *a: scans.append(a) or real(*a))
    reuse = BodyReuse(slots=8, max_bytes=2**24, least=LEAST)
    messages = history(30)
    for n in range(5):
        raw = orjson.dumps({"request": n, "messages": [*messages, *history(n)]})
        parsed, pending = reuse.parse(raw, ("slot", n), "messages", orjson.loads)
        reuse.keep(raw, ("slot", n), "messages", parsed, pending)
    assert scans == []
    raw = orjson.dumps({"request": 4, "messages": [*messages, *history(6)]})
    parsed, pending = reuse.parse(raw, ("slot", 4), "messages", orjson.loads)
    assert len(scans) == 1 and pending is not None  # the previous body scanned, then reused
    assert parsed == orjson.loads(raw)


NUL_TEXT = {"role": "user", "content": [{"type": "text", "text": "a\x00b"}]}
LITERAL = {"role": "user", "content": [{"type": "text", "text": "a \\u0000 written out"}]}


def test_a_reparsed_body_is_searched_for_the_watched_bytes_past_what_it_shares_alone():
    """``Kept.clean``: a body shares its leading bytes with its conversation's previous one,
    so when that one was clean of the watched bytes only the rest is searched."""
    watch = b"\\u0000"
    messages = history(30)
    first = orjson.dumps(body(messages))
    previous = kept(first, orjson.loads(first), "messages", watch)
    assert previous.clean
    grown = reparse(
        orjson.dumps(body([*messages, *history(2)])), "messages", previous, LEAST, watch
    )
    assert grown[1].clean
    nul = reparse(orjson.dumps(body([*messages, NUL_TEXT])), "messages", previous, LEAST, watch)
    assert not nul[1].clean
    # The shared bytes are not searched again: a previous body said clean is believed.
    early = [LITERAL, *messages]
    raw = orjson.dumps(body(early))
    assert watch in raw
    told = body_reuse.Kept(**{**_fields(kept(raw, orjson.loads(raw), "messages")), "clean": True})
    again = reparse(orjson.dumps(body([*early, *history(2)])), "messages", told, LEAST, watch)
    assert again[1].clean
    # A previous body that was not clean: the whole is searched.
    dirty = kept(raw, orjson.loads(raw), "messages", watch)
    assert not dirty.clean
    assert not reparse(orjson.dumps(body([*early, *history(2)])), "messages", dirty, LEAST, watch)[
        1
    ].clean
    assert not kept(raw, orjson.loads(raw), "messages").clean  # nothing watched: never clean


def _fields(entry: body_reuse.Kept) -> dict:
    return {name: getattr(entry, name) for name in entry.__slots__}


@pytest.mark.parametrize("where", ["a new message", "the fields after the history"])
def test_the_gate_refuses_a_nul_that_a_reused_body_brings(monkeypatch, where):
    """The NUL rule holds for a reused body: its new bytes are searched, and a previous body
    that held the escape written out (not a NUL) makes the whole be searched."""
    monkeypatch.setattr(
        gate, "_REUSE", BodyReuse(slots=8, max_bytes=2**24, least=LEAST, watch=gate._NUL_ESCAPE)
    )
    for lead in ([], [LITERAL]):
        messages = [*lead, *history(30)]
        session = f"s{len(lead)}"
        gate.read(_request(orjson.dumps(body(messages)), session=session), ANTHROPIC)
        grown = body([*messages, *history(2)])
        assert gate.read(_request(orjson.dumps(grown), session=session), ANTHROPIC) == grown
        if where == "a new message":
            bad, path = body([*messages, *history(2), NUL_TEXT]), f"messages.{len(messages) + 2}"
        else:
            bad, path = {**grown, "system": "be\x00brief"}, "system"
        with pytest.raises(BodyRefused) as refused:
            gate.read(_request(orjson.dumps(bad), session=session), ANTHROPIC)
        assert refused.value.field.startswith(path)


def test_the_shared_messages_are_found_wherever_the_first_change_is():
    """Back from the end, then halving: the count is the brute-force one for a change at
    every place."""
    messages = history(40)
    first = orjson.dumps(body(messages))
    previous = kept(first, orjson.loads(first), "messages")
    for changed in range(41):
        edited = [dict(m) for m in messages]
        if changed < 40:
            edited[changed]["role"] = "tool"
        raw = orjson.dumps(body([*edited, *history(2)]))
        expected = next(
            (i for i, (a, b) in enumerate(zip(messages, edited, strict=True)) if a != b), 40
        )
        assert body_reuse._shared(raw, previous) == expected
