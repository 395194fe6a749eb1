"""Round trips to PostgreSQL, counted where psycopg sends them (benchmarks only).

Django's ``execute_wrapper`` sees the ORM's statements only: not the hot
path's prepared ones (``sessions.hotpath`` uses psycopg's cursor), nor the
BEGIN and COMMIT psycopg sends itself. Here each send that waits for its
answer counts once: a statement, a PREPARE (the first use of a prepared
statement on a connection), a transaction command. ``RoundTrips.trace``
keeps each one's first words (``BENCH_TRACE=1`` in the benches prints them).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from psycopg import _connection_base, _cursor_base, client_cursor


def _words(query: Any, n: int = 6) -> str:
    # The head alone: a statement's text grows with what it writes (a 16 KB chain as
    # escaped bytea), and this runs inside the measured calls.
    head = query[:256] if isinstance(query, bytes | str) else str(query)[:256]
    text = head.decode(errors="replace") if isinstance(head, bytes) else head
    return " ".join(text.split(maxsplit=n)[:n])


class RoundTrips:
    """Counts psycopg's sends while on (``with RoundTrips() as trips``); one process-wide patch."""

    def __init__(self, *, trace: bool = False) -> None:
        self.kinds: Counter[str] = Counter()
        self.trace: list[str] | None = [] if trace else None
        self._saved: dict[str, Any] = {}

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    @property
    def statements(self) -> int:
        """SQL statements run (transaction commands and PREPAREs aside)."""
        return self.kinds["statement"]

    @property
    def transactions(self) -> int:
        return self.kinds["BEGIN"]

    def mark(self, label: str) -> None:
        if self.trace is not None:
            self.trace.append(f"--- {label}")

    def _note(self, kind: str, query: Any) -> None:
        self.kinds[kind] += 1
        if self.trace is not None:
            size = len(query) if isinstance(query, bytes | str) else 0
            self.trace.append(f"{kind:>9}: {size:>7} B  {_words(query, 10)}")

    def __enter__(self) -> RoundTrips:
        base, cursor = _connection_base.BaseConnection, _cursor_base.BaseCursor
        self._saved = {
            "exec": base._exec_command,
            "send": cursor._execute_send,
            "client_send": client_cursor.ClientCursorMixin._execute_send,
            "prepare": cursor._send_prepare,
            "prepared": cursor._send_query_prepared,
        }
        saved, note = self._saved, self._note

        def exec_command(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            word = _words(command, 1).upper()
            note(word if word in ("BEGIN", "COMMIT", "ROLLBACK") else "command", command)
            return saved["exec"](conn, command, *args, **kwargs)

        def kind(pgq: Any) -> str:
            word = _words(pgq.query, 1).upper()
            return "savepoint" if word in ("SAVEPOINT", "RELEASE") else "statement"

        def send(cur: Any, pgq: Any, *args: Any, **kwargs: Any) -> Any:
            note(kind(pgq), pgq.query)
            return saved["send"](cur, pgq, *args, **kwargs)

        def client_send(cur: Any, pgq: Any, *args: Any, **kwargs: Any) -> Any:
            note(kind(pgq), pgq.query)
            return saved["client_send"](cur, pgq, *args, **kwargs)

        def prepare(cur: Any, name: Any, pgq: Any, *args: Any, **kwargs: Any) -> Any:
            note("PREPARE", pgq.query)
            return saved["prepare"](cur, name, pgq, *args, **kwargs)

        def prepared(cur: Any, name: Any, pgq: Any, *args: Any, **kwargs: Any) -> Any:
            note(kind(pgq), pgq.query)
            return saved["prepared"](cur, name, pgq, *args, **kwargs)

        base._exec_command = exec_command
        cursor._execute_send = send
        client_cursor.ClientCursorMixin._execute_send = client_send
        cursor._send_prepare = prepare
        cursor._send_query_prepared = prepared
        return self

    def __exit__(self, *exc: object) -> None:
        base, cursor = _connection_base.BaseConnection, _cursor_base.BaseCursor
        base._exec_command = self._saved["exec"]
        cursor._execute_send = self._saved["send"]
        client_cursor.ClientCursorMixin._execute_send = self._saved["client_send"]
        cursor._send_prepare = self._saved["prepare"]
        cursor._send_query_prepared = self._saved["prepared"]
