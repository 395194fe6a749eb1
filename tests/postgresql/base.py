"""PostgreSQL for the test suite: the stock backend, flushed with DELETE.

A transactional test (``django_db(transaction=True)``: the proxy's, the live
servers', the workers') ends with Django's flush, which on PostgreSQL is one
``TRUNCATE`` of every table. TRUNCATE swaps each table's and each index's files,
so it costs the same on a handful of rows as on millions: 0.4–0.7 s a test on a
2-core machine, a seventh of the suite's run time. The few rows a test leaves go
by ``DELETE`` in milliseconds, all in one statement (one round trip). The
foreign keys Django makes on PostgreSQL are deferrable, so with every table in
the flush they are checked once, at its commit, when the tables are empty.

Content types and permissions stay: the flush's post_migrate signal would
recreate the very same rows (with new ids) at the cost of a hundred queries;
finding them present it only reads. A flush that resets sequences or cascades to
tables outside it keeps Django's TRUNCATE.

``tests/settings.py`` names this backend for a PostgreSQL ``DATABASE_URL``; the
processes tests start (servers, workers) load the service's own settings and the
stock backend.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base, operations

# What post_migrate makes again, identically, after every flush.
KEPT = frozenset({"django_content_type", "auth_permission"})


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(
        self,
        style: Any,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if not tables or reset_sequences or allow_cascade:
            return super().sql_flush(
                style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        emptied = [table for table in tables if table not in KEPT]
        deletes = "".join(f"DELETE FROM {self.quote_name(table)};" for table in emptied)
        return [f"SET CONSTRAINTS ALL DEFERRED;{deletes}"]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
