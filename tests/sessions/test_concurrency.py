"""Concurrent appends to one session get consecutive seqs, no gap, no duplicate.

Needs PostgreSQL (row locks); in CI DATABASE_URL points at it, locally the
test is skipped unless it does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connections

from sessions import hotpath
from sessions.models import Message, Session, hash_key
from sessions.services.append import session_append_messages
from sessions.services.keys import agent_key_create
from sessions.services.sessions import session_create

pytestmark = [pytest.mark.needs_postgres, pytest.mark.django_db(transaction=True)]


def run_together(count: int, work: Callable[[int], None]) -> None:
    """``work(0..count-1)`` on as many threads, released at once; re-raises what failed."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def run(n: int) -> None:
        try:
            barrier.wait()
            work(n)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_parallel_writers_get_consecutive_seqs_and_exact_counters():
    key, _ = agent_key_create(name="racer")
    session = session_create(owner=key, data={"model": "gpt-4o", "id": "race"})
    writers, batches, per_batch = 8, 10, 3

    def writer(n: int) -> None:
        for b in range(batches):
            session_append_messages(
                session=session,
                messages=[{"role": "user", "content": f"w{n} b{b} m{i}"} for i in range(per_batch)],
            )

    run_together(writers, writer)
    total = writers * batches * per_batch
    seqs = list(
        Message.objects.filter(session=session).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(1, total + 1))
    session = Session.objects.get(pk=session.pk)
    assert session.last_seq == total and session.message_count == total
    stored_tokens = sum(
        Message.objects.filter(session=session).values_list("token_count", flat=True)
    )
    assert session.conversation_tokens == stored_tokens
    # Each batch's three messages are contiguous: a batch is one transaction.
    contents = list(
        Message.objects.filter(session=session).order_by("seq").values_list("content", flat=True)
    )
    for start in range(0, total, per_batch):
        prefixes = {c.rsplit(" ", 1)[0] for c in contents[start : start + per_batch]}
        assert len(prefixes) == 1, contents[start : start + per_batch]


def test_parallel_retries_with_one_idempotency_key_store_once():
    key, _ = agent_key_create(name="retrier")
    session = session_create(owner=key, data={"model": "gpt-4o", "id": "retry"})
    responses = []

    def retry(_: int) -> None:
        responses.append(
            session_append_messages(
                session=session,
                messages=[{"role": "user", "content": "same"}],
                idempotency_key="retry-1",
                fingerprint="f",
            )
        )

    run_together(6, retry)
    assert Message.objects.filter(session=session).count() == 1
    assert {r["messages"][0]["seq"] for r in responses} == {1}


def test_parallel_writers_through_the_key_read_keep_seqs_and_counters_exact():
    """Each writer reads the row the way a request does (with its key, so the
    lock only checks the row version), then appends: every stale read must be
    caught by the version check and re-read under the lock."""
    key, raw = agent_key_create(name="racer")
    session_create(owner=key, data={"model": "gpt-4o", "id": "race-key"})
    digest = hash_key(raw)

    def writer(n: int) -> None:
        for b in range(12):
            session_append_messages(
                session=hotpath.session_for_key("race-key", digest),
                messages=[{"role": "user", "content": f"w{n} b{b} {'x' * (n + b)}"}] * 2,
            )

    run_together(6, writer)
    total = 6 * 12 * 2
    rows = Message.objects.filter(session__external_id="race-key").order_by("seq")
    assert list(rows.values_list("seq", flat=True)) == list(range(1, total + 1))
    session = Session.objects.get(external_id="race-key")
    assert session.last_seq == session.message_count == session.live_message_count == total
    assert session.conversation_tokens == sum(rows.values_list("token_count", flat=True))
