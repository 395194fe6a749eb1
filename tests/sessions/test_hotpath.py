"""The append's precompiled reads: rows load exactly as the ORM loads them, and
the version-checked lock never hands back a row another writer has changed
(with parallel writers: test_concurrency.py)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from sessions import hotpath
from sessions.models import AgentKey, Message, Session, hash_key
from sessions.services.append import session_append_messages
from sessions.services.keys import agent_key_create
from sessions.services.sessions import session_create, session_set_sections

pytestmark = pytest.mark.django_db


@pytest.fixture
def keyed_session():
    key, raw = agent_key_create(name="hot")
    session = session_create(
        owner=key,
        data={
            "model": "claude-sonnet-4-5",
            "id": "hot-1",
            "policy": {"compaction": {"auto": False}},
        },
    )
    session_set_sections(session=session, sections=[{"name": "base", "content": "Be brief."}])
    session_append_messages(
        session=session,
        messages=[
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "name": "ls", "arguments": {"path": "."}}],
            },
        ],
    )
    return key, raw, Session.objects.get(pk=session.pk)


def test_session_for_key_loads_every_field_as_the_orm_does(keyed_session):
    key, raw, expected = keyed_session
    loaded = hotpath.session_for_key("hot-1", hash_key(raw))
    assert loaded is not None and loaded.pk == expected.pk
    for field in Session._meta.concrete_fields:
        if field.attname in hotpath.HEAVY_FIELDS:
            assert field.attname in loaded.get_deferred_fields()
            continue
        assert getattr(loaded, field.attname) == getattr(expected, field.attname), field.name
    # JSON columns come back as Python data, not text; datetimes are aware.
    assert loaded.open_tool_calls == {"c1": "ls"}
    assert loaded.sections and loaded.sections[0]["name"] == "base"
    assert loaded.created_at.tzinfo is not None
    owner = AgentKey.objects.get(pk=key.pk)
    for name in ("id", "name", "prefix", "key_hash", "created_at", "last_used_at", "revoked_at"):
        assert getattr(loaded.owner, name) == getattr(owner, name), name


def test_session_for_key_misses_a_wrong_key_and_a_revoked_key(keyed_session):
    key, raw, _ = keyed_session
    assert hotpath.session_for_key("hot-1", hash_key(raw + "x")) is None
    assert hotpath.session_for_key("nope", hash_key(raw)) is None
    AgentKey.objects.filter(pk=key.pk).update(revoked_at=key.created_at)
    assert hotpath.session_for_key("hot-1", hash_key(raw)) is None


def test_lock_session_of_a_missing_row_raises_does_not_exist():
    with transaction.atomic(), pytest.raises(Session.DoesNotExist):
        hotpath.lock_session(987654)


@pytest.mark.needs_postgres
def test_relock_keeps_the_row_read_with_the_key_while_nobody_wrote(keyed_session):
    _, raw, _ = keyed_session
    loaded = hotpath.session_for_key("hot-1", hash_key(raw))
    with transaction.atomic():
        locked = hotpath.relock_session(loaded, exclude=hotpath.HEAVY_FIELDS)
    assert locked is loaded
    # The version is spent: a second lock in the same request reads the row.
    with transaction.atomic():
        again = hotpath.relock_session(loaded, exclude=hotpath.HEAVY_FIELDS)
    assert again is not loaded and again.last_seq == loaded.last_seq


@pytest.mark.needs_postgres
def test_relock_rereads_a_row_another_writer_changed(keyed_session):
    _, raw, expected = keyed_session
    loaded = hotpath.session_for_key("hot-1", hash_key(raw))
    Session.objects.filter(pk=expected.pk).update(conversation_tokens=12345)
    with transaction.atomic():
        locked = hotpath.relock_session(loaded, exclude=hotpath.HEAVY_FIELDS)
    assert locked is not loaded
    assert locked.conversation_tokens == 12345 and loaded.conversation_tokens != 12345


def test_relock_without_a_version_reads_the_row(keyed_session):
    _, _, expected = keyed_session
    with transaction.atomic():
        locked = hotpath.relock_session(expected, exclude=hotpath.HEAVY_FIELDS)
    assert locked is not expected and locked.pk == expected.pk


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def _append_through_the_key_read(raw: str, n: int) -> None:
    for i in range(n):
        session_append_messages(
            session=hotpath.session_for_key("hot-1", hash_key(raw)),
            messages=[{"role": "user", "content": f"turn {i}"}],
        )


@pytest.mark.needs_postgres
@pytest.mark.django_db(transaction=True)
def test_append_statements_are_prepared_once_per_connection(keyed_session):
    _, raw, _ = keyed_session
    connection.close()  # a new connection: nothing prepared yet
    _append_through_the_key_read(raw, 3)
    prepared = _prepared_statements()
    ours = [s for s in prepared if "agent_sessions_" in s]
    assert any(s.startswith("SELECT") and "key_hash" in s for s in ours)
    # No lock taken: the UPDATE (if the row is still the version read with
    # the key) and the INSERT are one statement.
    assert not any("FOR NO KEY UPDATE" in s for s in ours)
    assert any(
        s.startswith('WITH s AS (UPDATE "agent_sessions_session"')
        and 'INSERT INTO "agent_sessions_message"' in s
        for s in ours
    )
    # Three appends, still one prepared statement each: reused, not re-prepared.
    assert len(ours) == len(set(ours)) == 2
    _append_through_the_key_read(raw, 2)
    assert sorted(s for s in _prepared_statements() if "agent_sessions_" in s) == sorted(ours)


@pytest.mark.needs_postgres
@pytest.mark.django_db(transaction=True)
def test_prepared_statements_can_be_turned_off_for_pgbouncer(keyed_session, settings):
    settings.DB_PREPARED_STATEMENTS = False
    _, raw, _ = keyed_session
    connection.close()
    _append_through_the_key_read(raw, 3)
    assert not [s for s in _prepared_statements() if "agent_sessions_" in s]
    session = Session.objects.get(external_id="hot-1")
    assert session.last_seq == 5  # the fixture's two messages, then three more


@pytest.mark.needs_postgres
@pytest.mark.django_db(transaction=True)
def test_append_from_a_stale_read_takes_the_lock_and_counts_exactly(keyed_session):
    """Two appends from the same version of the row (two requests that read
    it with the key at once): the second finds the row changed, writes
    nothing unlocked, and appends under the lock after the first."""
    _, raw, expected = keyed_session
    first = hotpath.session_for_key("hot-1", hash_key(raw))
    second = hotpath.session_for_key("hot-1", hash_key(raw))
    a = session_append_messages(session=first, messages=[{"role": "user", "content": "one"}])
    b = session_append_messages(session=second, messages=[{"role": "user", "content": "two"}])
    assert [m["seq"] for m in a["messages"]] == [expected.last_seq + 1]
    assert [m["seq"] for m in b["messages"]] == [expected.last_seq + 2]
    row = Session.objects.get(pk=expected.pk)
    stored = Message.objects.filter(session=row)
    assert row.last_seq == expected.last_seq + 2
    assert row.message_count == stored.count() == expected.message_count + 2
    assert row.conversation_tokens == sum(m.token_count for m in stored)
    assert b["budget"]["used"] == row.used_tokens


@pytest.mark.needs_postgres
@pytest.mark.django_db(transaction=True)
def test_append_after_another_writer_keeps_that_writers_change(keyed_session):
    _, raw, expected = keyed_session
    loaded = hotpath.session_for_key("hot-1", hash_key(raw))
    # A tool-output reservation made after the read: a field the append writes.
    Session.objects.filter(pk=expected.pk).update(tool_reservations={"~1": 50}, reserved_tokens=50)
    session_append_messages(session=loaded, messages=[{"role": "user", "content": "x"}])
    row = Session.objects.get(pk=expected.pk)
    assert row.reserved_tokens == 50 and row.tool_reservations == {"~1": 50}
    assert row.last_seq == expected.last_seq + 1
