"""An estimated count meets a compaction: a real ``summarize`` run moves the
window past the message before its exact count lands, or keeps it live; either
way the exact count leaves the counters equal to a recount of the window."""

from __future__ import annotations

import random

import pytest
from django.db.models import Sum

from sessions.live import live_q
from sessions.models import Message, Session
from sessions.services.exact_counts import message_count_exact

from .conftest import turn

pytestmark = pytest.mark.django_db

_RNG = random.Random(11)
DENSE = "".join(_RNG.choice("0123456789abcdef") for _ in range(40_000))
WINDOW = {
    "model": "claude-sonnet-4-5",
    "context_window": 200_000,
    "max_output_tokens": 4_096,
    "buffer_tokens": 2_048,
}


@pytest.fixture(autouse=True)
def _small_budget(settings):
    settings.CONTEXTSVC_EXACT_TOKEN_CHARS = 10_000


def recount(session: Session) -> int:
    live = Message.objects.filter(live_q(session), session=session, retracted_at__isnull=True)
    return live.aggregate(t=Sum("token_count"))["t"] or 0


def estimated_session(alice, make_session, sid: str, *, big_first: bool) -> tuple[Session, int]:
    """Three turns, and a turn whose user message is estimated: first or last."""
    make_session(id=sid, **WINDOW)
    turns = [turn(t) for t in range(3)]
    big_turn = [{"role": "user", "content": DENSE}, {"role": "assistant", "content": "Read."}]
    seq = None
    for messages in [big_turn, *turns] if big_first else [*turns, big_turn]:
        response = alice.post(f"sessions/{sid}/messages", {"messages": messages})
        assert response.status_code == 200, response.content
        for message in response.json()["messages"]:
            if message["token_count_estimated"]:
                seq = message["seq"]
    assert seq is not None
    return Session.objects.get(external_id=sid), seq


def compact(alice, sid: str, retain_last_turns: int) -> None:
    response = alice.post(
        f"sessions/{sid}/compact",
        {"wait": True, "strategy": "summarize", "retain_last_turns": retain_last_turns},
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "succeeded", response.json()


def test_compacted_out_before_the_exact_count(alice, make_session):
    session, seq = estimated_session(alice, make_session, "out", big_first=True)
    compact(alice, "out", 1)
    session.refresh_from_db()
    assert session.window_start_seq > seq  # the estimated message left the window
    before = alice.get("sessions/out/budget").json()
    assert message_count_exact(session_id=session.pk, seq=seq) == "counted"
    session.refresh_from_db()
    assert session.conversation_tokens == recount(session)
    assert alice.get("sessions/out/budget").json()["used"] == before["used"]
    assert not Message.objects.get(session=session, seq=seq).token_count_estimated


def test_counted_after_a_compaction_that_kept_it(alice, make_session):
    # The last turn kept live: the window's counters were recounted by the
    # compaction from the estimate; the exact count moves them by the difference.
    session, seq = estimated_session(alice, make_session, "kept", big_first=False)
    compact(alice, "kept", 1)
    session.refresh_from_db()
    assert 1 < session.window_start_seq <= seq  # the window moved, the message stayed
    estimate = Message.objects.get(session=session, seq=seq).token_count
    before = session.conversation_tokens
    assert message_count_exact(session_id=session.pk, seq=seq) == "counted"
    session.refresh_from_db()
    exact = Message.objects.get(session=session, seq=seq).token_count
    assert exact < estimate
    assert session.conversation_tokens == before - (estimate - exact) == recount(session)
