"""The context record's largest messages and placeholder figures are kept
incrementally beside the per-process window cache (writing the
record adds ≤ 1 ms to a context GET, whatever the window's length); after
appends, trims, a compaction and a retract they still equal a recomputation
from the stored rows."""

from __future__ import annotations

from collections import Counter

import pytest

import sessions.selectors as selectors
from contextsvc.engine.window_stats import LARGEST
from sessions.models import ContextCall, Message, Session
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

SID = "stats"


def _post(client, messages) -> None:
    r = client.post(f"sessions/{SID}/messages", {"messages": messages})
    assert r.status_code in (200, 201), r.content


def _text_turn(i: int) -> list[dict]:
    # Sizes that are not monotonic in seq, with ties, so order and ties matter.
    size = (i * 37) % 11 + 1
    return [
        {"role": "user", "content": f"question {i} " + "why " * (size * 15)},
        {"role": "assistant", "content": f"answer {i} " + "because " * (size * 10)},
    ]


def _output(i: int, lines: int) -> str:
    return "\n".join(f"{i}:{j} src/module_{j}.py ok " + "x" * 30 for j in range(lines))


def _recomputed(session: Session) -> dict:
    """The figures from the stored rows of the live window, nothing cached."""
    rows = list(
        Message.objects.filter(
            session=session, seq__gte=session.window_start_seq, retracted_at__isnull=True
        )
        .order_by("seq")
        .values("seq", "role", "token_count", "view_state")
    )
    largest = sorted(rows, key=lambda r: (-(r["token_count"] or 0), r["seq"]))[:LARGEST]
    counts: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    for r in rows:
        if r["view_state"] != "full":
            counts[r["view_state"]] += 1
            tokens[r["view_state"]] += r["token_count"] or 0
    return {
        "largest": [(r["seq"], r["token_count"], r["view_state"]) for r in largest],
        "outputs": sum(r["token_count"] or 0 for r in rows if r["role"] == "tool"),
        "by_state": {s: {"count": counts[s], "tokens": tokens[s]} for s in counts},
        "count": sum(counts.values()),
        "tokens": sum(tokens.values()),
    }


def _recorded(client) -> dict:
    r = client.get(f"sessions/{SID}/context")
    assert r.status_code == 200, r.content
    call = ContextCall.objects.filter(session__external_id=SID).latest("id")
    b = call.breakdown
    return {
        "largest": [(m["seq"], m["tokens"], m["view_state"]) for m in b["largest"]],
        "outputs": call.components["outputs"],
        "by_state": b["placeholders"]["by_state"],
        "count": b["placeholders"]["count"],
        "tokens": b["placeholders"]["tokens"],
    }


def _window_tokens_match(session: Session) -> None:
    """The window's figures carry its token total (the build's cache plan reads it
    rather than adding the counts up): every live message's, as the session counts."""
    live = Message.objects.filter(
        session=session, seq__gte=session.window_start_seq, retracted_at__isnull=True
    )
    total = sum(m.token_count or 0 for m in live)
    assert selectors.context_window(session)[1].tokens == total == session.conversation_tokens


@pytest.fixture
def incremental(monkeypatch):
    """Which calls of ``window_stats`` extended cached figures (True) or read the whole window."""
    calls: list[bool] = []
    real = selectors.window_stats

    def spy(messages, start=None):
        calls.append(start is not None)
        return real(messages, start)

    monkeypatch.setattr(selectors, "window_stats", spy)
    return calls


def test_largest_and_placeholders_equal_a_recomputation_after_every_change(
    alice, make_session, incremental
):
    make_session(
        id=SID,
        context_window=200_000,
        policy={"tool_output_cache": {"context_budget_tokens": 3_000}},
    )
    for i in range(15):
        _post(alice, _text_turn(i))
    assert _recorded(alice) == _recomputed(Session.objects.get(external_id=SID))

    # Appends only: the cached figures are extended by the new messages alone.
    incremental.clear()
    for i in range(15, 30):
        _post(alice, _text_turn(i))
        session = Session.objects.get(external_id=SID)
        assert _recorded(alice) == _recomputed(session)
        _window_tokens_match(session)
    assert incremental and all(incremental), incremental

    # Trims: outputs past the tool-output budget turn older ones into placeholders.
    for i in range(6):
        _post(alice, [*tool_turn(f"c{i}", _output(i, 40 + 10 * i)), *_text_turn(100 + i)])
        expected = _recomputed(Session.objects.get(external_id=SID))
        assert _recorded(alice) == expected
    assert expected["by_state"].get("trimmed", {}).get("count", 0) >= 1, expected
    assert len(expected["largest"]) == LARGEST

    # A compaction: tool clearing, then the oldest turns dropped.
    for strategy in ("tool_clearing", "drop_oldest_turns"):
        r = alice.post(
            f"sessions/{SID}/compact", {"wait": True, "strategy": strategy, "retain_last_turns": 6}
        )
        assert r.status_code == 200, r.content
        session = Session.objects.get(external_id=SID)
        assert _recorded(alice) == _recomputed(session)
        _window_tokens_match(session)
    assert session.window_start_seq > 1

    # More appends after the compaction, then a retract of the last turn.
    _post(alice, [*tool_turn("late", _output(99, 120)), *_text_turn(200)])
    assert _recorded(alice) == _recomputed(Session.objects.get(external_id=SID))
    r = alice.post(f"sessions/{SID}/messages/retract", {"last": 4})
    assert r.status_code == 200, r.content
    session = Session.objects.get(external_id=SID)
    assert _recorded(alice) == _recomputed(session)
    _window_tokens_match(session)
    assert not Message.objects.filter(session=session, tool_call_id="late", retracted_at=None)


def test_the_record_of_a_cached_window_reads_no_message_but_the_largest(
    alice, make_session, incremental
):
    """A build of an unchanged window computes no figures at all; the next
    append's build reads the appended messages only."""
    make_session(id=SID)
    for i in range(30):
        _post(alice, _text_turn(i))
    alice.get(f"sessions/{SID}/context")
    incremental.clear()
    for _ in range(3):
        _recorded(alice)
    assert incremental == []
    _post(alice, _text_turn(31))
    assert _recorded(alice) == _recomputed(Session.objects.get(external_id=SID))
    assert incremental == [True]
