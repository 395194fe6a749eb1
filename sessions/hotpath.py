"""Precompiled SQL for the statements of every append: the key + session read,
then either the unlocked append (the session UPDATE, if the row is still the
version read, and the message INSERT in one statement) or the row lock, the
message INSERT and the session UPDATE.

The ORM spends ~1.3 ms compiling a 40-column SELECT of Session, and
``Model.objects.raw`` still reads ``cursor.description`` and works out the
column order per query. Here the SQL, the column order and the converters
are built once from the model's metadata (a new field is picked up without
editing SQL by hand), and on PostgreSQL the statements are prepared on the
server once per connection. The lock checks the row's version instead of
reading it again when nothing changed since the key read.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

import orjson
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Model

from .models import AgentKey, Message, Session

# Never needed by the append or the budget; can be a megabyte of JSON.
HEAVY_FIELDS = frozenset({"tools"})
# Key columns the key+session query already knows: it matched the hash it was
# given and only keys that are not revoked.
KEY_KNOWN_FIELDS = frozenset({"key_hash", "revoked_at"})


def _loader(model: type[Model], exclude: frozenset[str]) -> _Loader:
    return _cached_loader(model, exclude, connection.vendor)


@cache
def _cached_loader(model: type[Model], exclude: frozenset[str], vendor: str) -> _Loader:
    return _Loader(model, exclude)


class _Loader:
    """Rows of ``model`` (less ``exclude``) into instances, the way the ORM
    would, without the per-query cost of ``Model.objects.raw``: column order
    and converters are worked out once, not read off ``cursor.description``."""

    def __init__(self, model: type[Model], exclude: frozenset[str]) -> None:
        self.model = model
        self.fields = [f for f in model._meta.concrete_fields if f.attname not in exclude]
        self.names = frozenset(f.attname for f in self.fields)
        table = model._meta.db_table
        self.converters = []
        for i, field in enumerate(self.fields):
            col = field.get_col(table)
            funcs = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
            if funcs:
                self.converters.append((i, funcs, col))

    def columns(self, alias: str) -> str:
        qn = connection.ops.quote_name
        return ", ".join(f"{alias}.{qn(f.column)}" for f in self.fields)

    def load(self, row: Sequence[object]) -> Model:
        values = list(row[: len(self.fields)])
        for i, funcs, col in self.converters:
            value = values[i]
            for convert in funcs:
                value = convert(value, col, connection)
            values[i] = value
        # from_db marks the fields left out as deferred.
        return self.model.from_db(connection.alias, self.names, values)


def _is_postgres() -> bool:
    return connection.vendor == "postgresql"


@contextmanager
def _cursor() -> Iterator[Any]:
    """A cursor for the hot path's fixed statements.

    On PostgreSQL it binds parameters on the server and prepares each
    statement on first use (``DB_PREPARED_STATEMENTS``), so the server parses and
    plans the 40-column SELECT/UPDATE once per connection instead of on every
    request. Django's own cursors bind on the client (the default), which is
    right for the ORM's ever-changing SQL. Same connection, same transaction.
    ``DB_PREPARED_STATEMENTS=false`` keeps server-side binding but prepares
    nothing (for PgBouncer in transaction pooling mode). Being psycopg's own
    cursor, it does not show in Django's query log (``connection.queries``).

    Its errors still go through Django's error wrapper, as a Django cursor's
    do: psycopg's exceptions become ``django.db``'s and a lost connection is
    marked (``errors_occurred``), so Django drops it at the end of the request
    instead of failing every request on this thread until CONN_MAX_AGE. The
    health check (``DB_CONN_HEALTH_CHECKS``) runs here for the same reason:
    this is often the request's first statement.
    """
    conn = connections[DEFAULT_DB_ALIAS]  # once: each use of the proxy costs a lookup
    if conn.vendor != "postgresql":
        with conn.cursor() as cursor:
            yield cursor
        return
    conn.close_if_health_check_failed()
    with conn.wrap_database_errors:
        conn.ensure_connection()
        with _psycopg().Cursor(conn.connection) as cursor:
            yield _HotCursor(cursor)


@contextmanager
def pipelined() -> Iterator[None]:
    """Statements inside go to PostgreSQL together and are waited for once, at
    the end (psycopg's pipeline mode): the append's INSERT and UPDATE cost one
    round trip instead of two. Only for statements whose results nothing inside
    reads (a read inside still works: it waits for what was sent before it).
    An error of a statement inside is raised on leaving, still inside the
    caller's transaction, which it rolls back as any error does. SQLite: as is.
    """
    conn = connections[DEFAULT_DB_ALIAS]
    if conn.vendor != "postgresql":
        yield
        return
    with conn.wrap_database_errors:
        conn.ensure_connection()
        with conn.connection.pipeline():
            yield


@cache
def _psycopg() -> Any:
    # Django's PostgreSQL backend has loaded it by now; on SQLite (the quick
    # start) it is never imported, a third of a second less of every start.
    return importlib.import_module("psycopg")


class _HotCursor:
    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        # False: bound on the server but never prepared (PgBouncer-safe).
        self.prepare = settings.DB_PREPARED_STATEMENTS

    def execute(self, sql: str, params: Sequence[object]) -> None:
        self.cursor.execute(sql, params, prepare=self.prepare)

    def fetchone(self) -> Any:
        return self.cursor.fetchone()


@cache
def _lock_sql(exclude: frozenset[str], vendor: str) -> str:
    # NO KEY UPDATE: the lock must not block inserts of messages, which
    # reference the session row by foreign key. SQLite has no row locks; its
    # transactions are IMMEDIATE (settings), which serialises writers instead.
    lock = " FOR NO KEY UPDATE" if vendor == "postgresql" else ""
    table = connection.ops.quote_name(Session._meta.db_table)
    return f"SELECT {_loader(Session, exclude).columns('s')} FROM {table} s WHERE s.id = %s{lock}"


@cache
def _read_sql(vendor: str) -> str:
    table = connection.ops.quote_name(Session._meta.db_table)
    return f"SELECT {_loader(Session, frozenset()).columns('s')} FROM {table} s WHERE s.id = %s"


def read_session(pk: int) -> Session:
    """``Session.objects.get(pk=pk)`` (every column, no lock), compiled once."""
    with _cursor() as cursor:
        cursor.execute(_read_sql(connection.vendor), [pk])
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"session {pk} is gone")
    return _loader(Session, frozenset()).load(row)


@cache
def _version_lock_sql() -> str:
    table = connection.ops.quote_name(Session._meta.db_table)
    return f"SELECT s.xmin::text FROM {table} s WHERE s.id = %s FOR NO KEY UPDATE"


def lock_session(pk: int, *, exclude: frozenset[str] = frozenset()) -> Session:
    """Re-read a session under its row lock (call inside transaction.atomic).

    The one lock every writer of the session row takes (appends, settings,
    tool budget, the sent tool tokens, compaction), so they serialise on the
    row; on PostgreSQL it is ``FOR NO KEY UPDATE``, which does not block
    inserts of messages. ``exclude`` leaves columns out (deferred): the append
    path and ``session_set_sent_tool_tokens`` leave out ``HEAVY_FIELDS``.
    """
    with _cursor() as cursor:
        cursor.execute(_lock_sql(exclude, connection.vendor), [pk])
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"session {pk} is gone")
    return _loader(Session, exclude).load(row)


def relock_session(session: Session, *, exclude: frozenset[str]) -> Session:
    """``lock_session`` for a session read moments ago by ``session_for_key``.

    On PostgreSQL the lock fetches only the row's version (``xmin``, which
    every UPDATE changes); while it matches the version read before, the
    instance in hand is the row as it is now and is returned as it is: no
    second read of ~40 columns. A mismatch (a writer got in between) re-reads
    the row in full, still under the lock. Callers must not have changed the
    instance before the lock.
    """
    version = getattr(session, "_row_version", None)
    if version is None or not _is_postgres():
        return lock_session(session.pk, exclude=exclude)
    session._row_version = None  # spent: our own write changes xmin
    with _cursor() as cursor:
        cursor.execute(_version_lock_sql(), [session.pk])
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"session {session.pk} is gone")
    if row[0] == version:
        return session
    return lock_session(session.pk, exclude=exclude)


@cache
def _by_key_sql(vendor: str) -> str:
    qn = connection.ops.quote_name
    keys = _loader(AgentKey, KEY_KNOWN_FIELDS).columns("k")
    version = ", s.xmin::text" if vendor == "postgresql" else ""
    return (
        f"SELECT {_loader(Session, HEAVY_FIELDS).columns('s')}, {keys}{version} "
        f"FROM {qn(Session._meta.db_table)} s JOIN {qn(AgentKey._meta.db_table)} k "
        f"ON k.{qn('id')} = s.{qn('owner_id')} "
        f"WHERE s.{qn('external_id')} = %s AND k.{qn('key_hash')} = %s AND k.{qn('revoked_at')} IS NULL"
    )


def session_for_key(external_id: str, key_hash: str) -> Session | None:
    """The session a URL names together with its (active) owner key, in one query."""
    with _cursor() as cursor:
        cursor.execute(_by_key_sql(connection.vendor), [external_id, key_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    sessions = _loader(Session, HEAVY_FIELDS)
    keys = _loader(AgentKey, KEY_KNOWN_FIELDS)
    n = len(sessions.fields)
    session = sessions.load(row)
    owner = keys.load(row[n : n + len(keys.fields)])
    owner.key_hash = key_hash
    owner.revoked_at = None
    session.owner = owner
    session._row_version = row[n + len(keys.fields)] if _is_postgres() else None
    return session


@cache
def _update_sql(fields: tuple[str, ...]) -> str:
    qn = connection.ops.quote_name
    sets = ", ".join(f"{qn(Session._meta.get_field(f).column)} = %s" for f in fields)
    return f"UPDATE {qn(Session._meta.db_table)} SET {sets} WHERE {qn('id')} = %s"


@cache
def _preps(model: type[Model], names: tuple[str, ...]) -> tuple:
    return tuple((f.attname, f.get_db_prep_save) for f in map(model._meta.get_field, names))


def save_fields(session: Session, fields: tuple[str, ...]) -> None:
    """``session.save(update_fields=fields)`` without compiling the UPDATE each time."""
    conn = connections[DEFAULT_DB_ALIAS]  # once, not through the proxy per value
    values = [prep(getattr(session, name), conn) for name, prep in _preps(Session, fields)]
    with _cursor() as cursor:
        cursor.execute(_update_sql(fields), [*values, session.pk])


@cache
def _insert_fields() -> tuple:
    return tuple(f for f in Message._meta.concrete_fields if not f.primary_key)


@cache
def _insert_sql(rows: int) -> str:
    qn = connection.ops.quote_name
    fields = _insert_fields()
    columns = ", ".join(qn(f.column) for f in fields)
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return f"INSERT INTO {qn(Message._meta.db_table)} ({columns}) VALUES {', '.join([one] * rows)}"


def insert_messages(rows: list[Message]) -> None:
    """``Message.objects.bulk_create(rows)`` for the append, compiled once per
    batch size; the new ids are not read back (nothing on the append needs them)."""
    preps = _preps(Message, tuple(f.name for f in _insert_fields()))
    conn = connections[DEFAULT_DB_ALIAS]
    with _cursor() as cursor:
        # 500 rows × ~14 columns stays far below SQLite's and PostgreSQL's
        # limits on parameters per statement.
        for start in range(0, len(rows), 500):
            chunk = rows[start : start + 500]
            params = [prep(getattr(row, name), conn) for row in chunk for name, prep in preps]
            cursor.execute(_insert_sql(len(chunk)), params)


def _cast(field: Any) -> str:
    # No length on a varchar: a cast to varchar(10) would cut a value
    # silently, the column refuses it.
    return re.sub(r"[(].*[)]", "", field.cast_db_type(connection))


@cache
def _append_unlocked_sql(fields: tuple[str, ...], rows_as_json: bool) -> str:
    qn = connection.ops.quote_name
    sets = ", ".join(f"{qn(Session._meta.get_field(f).column)} = %s" for f in fields)
    others = _unlocked_insert_fields()
    columns = ", ".join(qn(f.column) for f in others)
    if rows_as_json:
        # The rows as one JSON array of objects: orjson writes it in a few µs,
        # where psycopg spent ~60 µs of Python adapting a list per column.
        shape = ", ".join(f"{qn(f.column)} {_cast(f)}" for f in others)
        source = f"jsonb_to_recordset(%s::jsonb) AS u({shape})"
    else:
        # One array per column, whatever the number of rows: one SQL text (and
        # one prepared statement) for every batch size, and few parameters
        # (psycopg caches the conversion of a query of at most 50).
        source = f"unnest({', '.join(f'%s::{_cast(f)}[]' for f in others)}) AS u"
    return (
        f"WITH s AS (UPDATE {qn(Session._meta.db_table)} SET {sets} "
        f"WHERE {qn('id')} = %s AND xmin::text = %s RETURNING {qn('id')}) "
        f"INSERT INTO {qn(Message._meta.db_table)} ({qn('session_id')}, {columns}) "
        f"SELECT s.{qn('id')}, u.* FROM s, {source}"
    )


@cache
def _unlocked_insert_fields() -> tuple:
    return tuple(f for f in _insert_fields() if f.attname != "session_id")


def _rows_json(rows: list) -> str | None:
    """The rows as JSON for ``jsonb_to_recordset`` (a JSON null is SQL NULL
    there, as ``None`` is in a column), or None for a value orjson does not
    write as the ORM would have (an integer past 64 bits, a lone surrogate):
    those rows go as arrays, through each field's own conversion."""
    names = [(f.column, f.attname) for f in _unlocked_insert_fields()]
    try:
        data = orjson.dumps(
            [{column: getattr(row, name) for column, name in names} for row in rows],
            option=orjson.OPT_NON_STR_KEYS,
        )
    except (orjson.JSONEncodeError, TypeError):
        return None
    return data.decode()


def append_unlocked(session: Session, version: str, fields: tuple[str, ...], rows: list) -> bool:
    """The append's UPDATE of the session and INSERT of its messages in one
    statement, taking no lock beforehand: the UPDATE applies only while the
    row's version (``xmin``) is still ``version``, the one the new values were
    worked out from, and the messages are inserted only with it. In
    autocommit it is its own transaction (no BEGIN and COMMIT round trips).
    False: the row changed since it was read (or is gone) and nothing was
    written; the caller takes the lock and works the values out again.
    PostgreSQL only.
    """
    conn = connections[DEFAULT_DB_ALIAS]
    values = [prep(getattr(session, name), conn) for name, prep in _preps(Session, fields)]
    batch = _rows_json(rows)
    if batch is not None:
        data = [batch]
    else:
        preps = _preps(Message, tuple(f.name for f in _unlocked_insert_fields()))
        data = [[prep(getattr(row, name), conn) for row in rows] for name, prep in preps]
    with _cursor() as cursor:
        sql = _append_unlocked_sql(fields, batch is not None)
        cursor.execute(sql, [*values, session.pk, version, *data])
        return cursor.cursor.rowcount == len(rows)
