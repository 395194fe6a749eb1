"""The upstream body is written from where its history stops being the previous call's own
objects (``proxy.upstream_json``): always byte for byte what writing it whole gives."""

from __future__ import annotations

import random

import orjson
import pytest
from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply
from proxy import upstream_json
from proxy.upstream import encode_json
from proxy.upstream_json import HistoryJson, write
from tests.proxy.conftest import asgi_claude

LEAST = 4


def message(n: int, rng: random.Random) -> dict:
    kind = rng.choice(["text", "blocks", "nested", "unicode", "empty"])
    if kind == "text":
        return {"role": "user", "content": f"turn {n} " * rng.randint(0, 5)}
    if kind == "blocks":
        return {"role": "assistant", "content": [{"type": "text", "text": f"r{n}"}]}
    if kind == "nested":
        return {
            "role": "assistant",
            "content": [{"type": "tool_use", "input": {"a": [n, {"b": None}]}}],
        }
    if kind == "unicode":
        return {"role": "user", "content": f'é \u2028 "quoted" \\ 🙂 {n}'}
    return {}


def body_of(history: list, order: int) -> dict:
    """The history between, before, after or without other fields."""
    fields = [("model", "m"), ("max_tokens", 500), ("stream", True), ("tools", [{"name": "t"}])]
    cut = order % (len(fields) + 1)
    return dict([*fields[:cut], ("messages", history), *fields[cut:]])


def test_random_growths_edits_and_truncations_are_written_as_a_whole_write_writes_them():
    rng = random.Random(1729)
    writer = HistoryJson(slots=4, max_bytes=2**24, least=LEAST)
    history = [message(n, rng) for n in range(10)]
    reused = 0
    for step in range(400):
        action = rng.random()
        if action < 0.6:  # the common case: a few new messages at the end
            history = [
                *history,
                *(message(1000 + step * 3 + k, rng) for k in range(rng.randint(0, 3))),
            ]
        elif action < 0.75:  # one message replaced by another object (a marker moved)
            i = rng.randrange(len(history))
            history = [
                *history[:i],
                {**history[i], "cache_control": {"type": "ephemeral"}},
                *history[i + 1 :],
            ]
        elif action < 0.85 and len(history) > LEAST + 2:  # a compaction: the start goes
            history = history[rng.randint(1, len(history) - LEAST) :]
        else:  # the same objects again, or a shorter history
            history = history[: rng.randint(max(1, len(history) // 2), len(history))]
        previous = writer._kept.get("s")
        body = body_of(history, step)
        raw = writer.encode(body, "messages", "s")
        assert raw == orjson.dumps(body)
        if (
            previous is not None
            and len(history) >= LEAST
            and history[:1]
            and history[0] is previous.items[0]
        ):
            reused += 1
    assert reused > 200  # most steps copied bytes kept from the step before


def test_the_shared_items_bytes_are_the_kept_ones_and_only_new_items_are_written(monkeypatch):
    rng = random.Random(7)
    history = [message(n, rng) for n in range(50)]
    first = write(body_of(history, 2), "messages", None)
    grown = [*history, {"role": "user", "content": "new"}]
    written: list = []
    real = orjson.dumps
    monkeypatch.setattr(upstream_json.orjson, "dumps", lambda v: written.append(v) or real(v))
    second = write(body_of(grown, 2), "messages", first)
    assert second.raw == real(body_of(grown, 2))
    items_written = [v for v in written if isinstance(v, dict) and "role" in v]
    assert items_written == [grown[-1]]  # one new item; the 50 kept ones were copied
    assert second.ends[:50] == first.ends  # offsets from the history's "["


def test_a_body_orjson_cannot_write_is_written_whole_and_its_session_forgotten():
    writer = HistoryJson(slots=4, max_bytes=2**24, least=LEAST)
    history = [{"role": "user", "content": f"t{n}"} for n in range(6)]
    writer.encode(body_of(history, 1), "messages", "s")
    assert writer._kept.get("s") is not None
    for odd in ({1: "a key that is no string"}, {"big": 2**70}):
        body = body_of([*history, odd], 1)
        assert writer.encode(body, "messages", "s") == encode_json(body)
        assert orjson.loads(writer.encode(body, "messages", "s"))["messages"][-1] in (
            {"1": "a key that is no string"},
            {"big": 2**70},
        )
        assert writer._kept.get("s") is None


@pytest.mark.parametrize(
    "history", [[], [{"role": "user", "content": "x"}] * (LEAST - 1), "text", None]
)
def test_a_short_or_odd_history_is_written_whole_and_nothing_is_kept(history):
    writer = HistoryJson(slots=4, max_bytes=2**24, least=LEAST)
    body = {"model": "m", "messages": history}
    assert writer.encode(body, "messages", "s") == orjson.dumps(body)
    assert writer._kept.get("s") is None


def test_sessions_are_kept_apart_and_bounded_by_their_bytes():
    writer = HistoryJson(slots=8, max_bytes=2000, least=LEAST)
    bodies = {
        s: body_of([{"role": "user", "content": f"{s} {n} " * 20} for n in range(8)], 0)
        for s in "abc"
    }
    for s, body in bodies.items():
        assert writer.encode(body, "messages", s) == orjson.dumps(body)
    kept = [s for s in "abc" if writer._kept.get(s) is not None]
    assert "c" in kept and len(kept) < 3  # each is ~1 KB: the oldest went
    # Another session's objects are never taken for this one's.
    other = body_of([*bodies["a"]["messages"], {"role": "user", "content": "more"}], 0)
    assert writer.encode(other, "messages", "c") == orjson.dumps(other)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("model_profiles")
def test_through_the_proxy_the_next_call_copies_the_previous_bytes_and_upstream_gets_them(
    upstreams, alice_key
):
    fake, _ = upstreams
    upstream_json.SENT.clear()
    history: list[dict] = []
    for n in range(40):
        history += [
            {"role": "user", "content": f"step {n}: look at the handler"},
            {"role": "assistant", "content": [{"type": "text", "text": f"done {n}"}]},
        ]

    async def call(messages):
        client = asgi_claude(alice_key[1], session="ses_upstream_json")
        reply = await client.messages.create(
            model="claude-opus-4-5", max_tokens=100, messages=messages
        )
        return reply.content[0].text

    first = [*history, {"role": "user", "content": "next"}]
    fake.script(ScriptedReply(text="one"), ScriptedReply(text="two"))
    text = async_to_sync(call)(first)
    kept = upstream_json.SENT._kept.get(next(iter(upstream_json.SENT._kept._data)))
    second = [
        *first,
        {"role": "assistant", "content": [{"type": "text", "text": text}]},
        {"role": "user", "content": "more"},
    ]
    async_to_sync(call)(second)
    sent = fake.requests[-1]
    now = upstream_json.SENT._kept.get(next(iter(upstream_json.SENT._kept._data)))
    assert len(now.items) >= len(second) - 1  # the managed history: the client's and more
    shared = sum(1 for a, b in zip(kept.items, now.items, strict=False) if a is b)
    assert shared >= len(first) - 2  # all but the newest, whose cache marker moved
    assert orjson.loads(now.raw) == sent.body  # upstream got the bytes written
    assert now.raw == orjson.dumps(sent.body)
