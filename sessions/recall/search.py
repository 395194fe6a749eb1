"""Searching the recall index: hits newest first, paged, with seq, tool, ref, line and snippet.

PostgreSQL: candidates come from the trigram index (``text ILIKE '%literal%'``
for the query, or for each literal a regex must contain) or, for words in any
order, from the full-text index; each candidate segment (≤ 2 KiB) is then
matched line by line in Python, with the same ``regex`` engine and time
limit as grep. A page reads at most ``MAX_ROUNDS`` batches of candidates: a
constant number of queries, whatever the session's size. SQLite has no such
index: the search walks the session's segments newest first, at most
``CONTEXTSVC_RECALL_SCAN_SEGMENTS`` of them, and the answer says where it
stopped (``next_cursor``), so nothing is silently left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex
from django.conf import settings
from django.db import connection

from contextsvc.engine.recall import SEARCH_TOOL_NAME, search_available
from contextsvc.engine.recall_segments import Segment, line_hits, required_literals
from contextsvc.errors import ValidationFailed

from ..models import RecallSegment, Session, ToolOutput

CANDIDATES = 200  # segments a round reads
RECENT = 128  # PostgreSQL's first round: the newest segments (~256 KiB), read as they come
# PostgreSQL's later rounds: slices of the session's seqs above these shares
# of its last seq, newest first (the last one reaches seq 1).
WINDOWS = (7 / 8, 3 / 4, 1 / 2, 0.0)
MAX_ROUNDS = 6
# A cursor at (seq, _PAST_EVERY_ID) goes on strictly below seq.
_PAST_EVERY_ID = 2**62
_FIELDS = ("id", "seq", "source", "role", "tool_name", "ref", "first_line", "text")


@dataclass(frozen=True, slots=True)
class RecallQuery:
    query: str
    regex: bool = False
    ignore_case: bool = True
    tool_name: str | None = None
    seq_from: int | None = None
    seq_to: int | None = None
    limit: int = 20
    cursor: str | None = None


@dataclass(slots=True)
class _Cursor:
    seq: int
    id: int
    line: int

    @classmethod
    def parse(cls, text: str | None) -> _Cursor | None:
        if not text:
            return None
        try:
            seq, pk, line = (int(p) for p in text.split(":"))
        except ValueError:
            raise ValidationFailed(
                "cursor: not a cursor this search returned (next_cursor)",
                details={"field": "cursor"},
            ) from None
        return cls(seq, pk, line)

    def __str__(self) -> str:
        return f"{self.seq}:{self.id}:{self.line}"


@dataclass(slots=True)
class _Page:
    hits: list[dict[str, Any]] = field(default_factory=list)
    next_cursor: _Cursor | None = None
    rounds: int = 0


def _like(literal: str) -> str:
    escaped = literal.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _matcher(q: RecallQuery) -> Callable[[str, int], tuple[int, int] | None]:
    flags = regex.MULTILINE | (regex.IGNORECASE if q.ignore_case else 0)
    pattern = q.query if q.regex else regex.escape(q.query)
    try:
        rx = regex.compile(pattern, flags)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise ValidationFailed(
            f"query: invalid regular expression: {exc}", details={"field": "query"}
        ) from None
    deadline = time.monotonic() + settings.CONTEXTSVC_GREP_TIME_LIMIT_MS / 1000

    def search(text: str, pos: int) -> tuple[int, int] | None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timeout()
        try:
            found = rx.search(text, pos, timeout=left)
        except TimeoutError:
            raise _timeout() from None
        if found is None:
            return None
        if found.end() == found.start() and found.start() >= len(text):
            return None
        return found.start(), found.end()

    return search


def _timeout() -> ValidationFailed:
    limit = settings.CONTEXTSVC_GREP_TIME_LIMIT_MS / 1000
    return ValidationFailed(
        f"query: the search exceeded its time limit of {limit:g} s; use a more specific query",
        details={"field": "query", "reason": "timeout"},
    )


def _literals(q: RecallQuery) -> list[str]:
    if not q.regex:
        if len(q.query) < 3:
            raise ValidationFailed(
                "query: at least 3 characters (the index finds text by its trigrams)",
                details={"field": "query"},
            )
        return [q.query]
    literals = required_literals(q.query)
    if not literals:
        raise ValidationFailed(
            "query: a regular expression needs a run of at least 3 plain characters outside "
            "groups and alternatives (e.g. 'MARK-[0-9]+' has 'MARK-'), so the index can "
            "find candidates; search for that text, or add one",
            details={"field": "query"},
        )
    return literals


def recall_search(session: Session, q: RecallQuery, *, indexed_seq: int) -> dict[str, Any]:
    """One page of hits, newest first (PostgreSQL: index; SQLite: bounded walk)."""
    literals = _literals(q)
    search = _matcher(q)
    cursor = _Cursor.parse(q.cursor)
    postgres = connection.vendor == "postgresql"
    page = _collect(session, q, literals if postgres else [], search, cursor, postgres)
    mode = "substring"
    if not page.hits and not q.regex and cursor is None and len(q.query.split()) > 1 and postgres:
        page = _collect_words(session, q)
        mode = "all words" if page.hits else mode
    return {
        "query": q.query,
        "regex": q.regex,
        "matched": "regex" if q.regex else mode,
        "hits": [_with_place(h, session) for h in page.hits],
        "hit_count": len(page.hits),
        "next_cursor": str(page.next_cursor) if page.next_cursor else None,
        "searched": "index" if postgres else "scan",
        "indexed_through_seq": indexed_seq,
        "last_seq": session.last_seq,
        "how_to_read": (
            "Read around a hit with tool_output_cache(ref_id=<ref>, offset=<line>); "
            f"more hits: {SEARCH_TOOL_NAME} with cursor=<next_cursor>."
        ),
    }


def _with_place(hit: dict[str, Any], session: Session) -> dict[str, Any]:
    seq = hit["seq"]
    hit["in_context"] = hit["source"] != "summary" and (
        seq >= session.window_start_seq or seq <= session.head_end_seq
    )
    return hit


def _base_sql(q: RecallQuery, *, walk: bool = False) -> tuple[list[str], list[Any]]:
    # "+ 0": the walk's index (migration 0017); plain, only the GIN indexes serve it.
    where = ["session_id + 0 = %s" if walk else "session_id = %s"]
    params: list[Any] = []
    if q.tool_name:
        where.append("tool_name = %s")
        params.append(q.tool_name)
    if q.seq_from is not None:
        where.append("seq >= %s")
        params.append(q.seq_from)
    if q.seq_to is not None:
        where.append("seq <= %s")
        params.append(q.seq_to)
    return where, params


def _collect(
    session: Session,
    q: RecallQuery,
    literals: list[str],
    search: Callable[[str, int], tuple[int, int] | None],
    cursor: _Cursor | None,
    postgres: bool,
) -> _Page:
    """Hits from the newest segments on, at most ``CANDIDATES`` segments a round.

    PostgreSQL: the first round reads the newest ``RECENT`` segments as they
    come (a common word fills a page there). Later rounds take their
    candidates from the trigram index, one slice of the session's seqs at a
    time, newest first (``WINDOWS``): the index re-checks each candidate's
    text, so a term found in many segments costs one slice's candidates, not
    the whole session's, and the number of rounds stays the same whatever the
    session's size. Each slice's set is materialized, so the planner cannot
    turn it into a walk over the session's rows.
    """
    table = connection.ops.quote_name(RecallSegment._meta.db_table)
    where, params = _base_sql(q)
    params.insert(0, session.pk)
    walk_where, _ = _base_sql(q, walk=True)
    text_where = ["text ILIKE %s"] * len(literals)
    text_params = [_like(literal) for literal in literals]
    fields = ", ".join(_FIELDS)
    order = "ORDER BY seq DESC, id ASC"
    floors = [int(session.last_seq * f) for f in WINDOWS]
    page = _Page()
    rounds = MAX_ROUNDS if postgres else -(-settings.CONTEXTSVC_RECALL_SCAN_SEGMENTS // CANDIDATES)
    position = cursor
    for n in range(rounds):
        keyset, keyset_params = "", []
        if position is not None:
            keyset = " AND (seq < %s OR (seq = %s AND id >= %s))"
            keyset_params = [position.seq, position.seq, position.id]
        floor = 0
        if not postgres:
            scope = " AND ".join(walk_where) + keyset
            sql = f"SELECT {fields} FROM {table} WHERE {scope} {order} LIMIT {CANDIDATES}"
            args = params + keyset_params
        elif n == 0:
            scope = " AND ".join(walk_where) + keyset
            sql = (
                f"SELECT {fields} FROM (SELECT {fields} FROM {table} WHERE {scope} {order} "
                f"LIMIT {RECENT}) s WHERE {' AND '.join(text_where)} {order}"
            )
            args = params + keyset_params + text_params
        else:
            # The slice (floor, top]: any floor below top is right; one below
            # top - 1 moves on when top is the last slice's floor + 1.
            top = position.seq if position is not None else session.last_seq + 1
            floor = next((f for f in floors if f < top - 1), 0)
            sql = (
                f"WITH m AS MATERIALIZED (SELECT id FROM {table} WHERE "
                f"{' AND '.join(where + text_where)} AND seq > %s{keyset}) "
                f"SELECT {fields} FROM {table} WHERE id IN (SELECT id FROM m) "
                f"{order} LIMIT {CANDIDATES}"
            )
            args = params + text_params + [floor] + keyset_params
        with connection.cursor() as c:
            c.execute(sql, args)
            rows = c.fetchall()
        page.rounds += 1
        for pk, seq, source, role, tool_name, ref, first_line, text in rows:
            after = position.line if position and position.id == pk else 0
            for hit in line_hits(Segment(first_line, text), search, after_line=after):
                if len(page.hits) >= q.limit:
                    page.next_cursor = _Cursor(seq, pk, hit.line - 1)
                    return page
                page.hits.append(_hit(seq, source, role, tool_name, ref, hit.line, hit.snippet))
        if postgres and n == 0:
            with connection.cursor() as c:
                c.execute(
                    f"SELECT seq, id FROM {table} WHERE {scope} {order} OFFSET {RECENT - 1} LIMIT 1",
                    params + keyset_params,
                )
                boundary = c.fetchone()
            if boundary is None:
                return page  # the whole session fit in the first round
            position = _Cursor(boundary[0], boundary[1] + 1, 0)
        elif len(rows) == CANDIDATES:
            # The next round starts after the last segment read (its lines all read).
            position = _Cursor(rows[-1][1], rows[-1][0] + 1, 0)
        elif floor > 0:
            position = _Cursor(floor + 1, _PAST_EVERY_ID, 0)  # seq <= floor: the slice below
        else:
            return page
    page.next_cursor = position
    return page


def _hit(
    seq: int, source: str, role: str, tool_name: str, ref: str | None, line: int, text: str
) -> dict[str, Any]:
    return {
        "seq": seq,
        "source": source,
        "role": role,
        "tool_name": tool_name or None,
        "ref": ref,
        "line": line,
        "snippet": text,
    }


def _collect_words(session: Session, q: RecallQuery) -> _Page:
    """A plain query of several words with no exact match: segments holding every word
    (the full-text index), hits on the lines that hold the most of them."""
    table = connection.ops.quote_name(RecallSegment._meta.db_table)
    where, params = _base_sql(q)
    params.insert(0, session.pk)
    where.append(
        "to_tsvector('simple'::regconfig, text) @@ plainto_tsquery('simple'::regconfig, %s)"
    )
    params.append(q.query)
    sql = (
        f"SELECT {', '.join(_FIELDS)} FROM {table} WHERE {' AND '.join(where)} "
        f"ORDER BY seq DESC, id ASC LIMIT {CANDIDATES}"
    )
    with connection.cursor() as c:
        c.execute(sql, params)
        rows = c.fetchall()
    words = [w.lower() for w in q.query.split()]
    page = _Page(rounds=1)
    for _pk, seq, source, role, tool_name, ref, first_line, text in rows:
        lines = text.split("\n")
        scored = [(sum(w in line.lower() for w in words), i) for i, line in enumerate(lines)]
        best = max((s for s, _ in scored), default=0)
        for score, i in scored:
            if score == best and score and len(page.hits) < q.limit:
                page.hits.append(
                    _hit(seq, source, role, tool_name, ref, first_line + i, lines[i][:300])
                )
    return page


def recall_searchable(session: Session) -> Callable[[Sequence[str]], set[str]] | None:
    """What the compaction's retention check asks: of these texts, which does a search find?

    None when the session's agent cannot call ``history_search``
    (``engine.recall.search_available``: its summaries and views then name no
    such tool): only a ref still in the window makes a fact reachable, through
    the ref tools.
    """
    if not search_available(session.policy):
        return None
    return lambda texts: recall_find_texts(session, texts)


def recall_find_texts(session: Session, texts: Sequence[str]) -> set[str]:
    """The ``texts`` some segment of the session contains (case-insensitive), by the index.

    PostgreSQL: one query, each text an index probe. SQLite: the bounded walk.
    """
    wanted = sorted({t for t in texts if len(t) >= 3})
    if not wanted:
        return set()
    table = connection.ops.quote_name(RecallSegment._meta.db_table)
    outputs = connection.ops.quote_name(ToolOutput._meta.db_table)
    if connection.vendor == "postgresql":
        with connection.cursor() as c:
            # A text is found in some segment, or is the ref of an indexed output
            # (every hit names its ref).
            c.execute(
                f"SELECT t.n FROM unnest(%s::text[], %s::text[]) AS t(n, pat) WHERE EXISTS "
                f"(SELECT 1 FROM {table} WHERE session_id = %s AND text ILIKE t.pat) OR EXISTS "
                f"(SELECT 1 FROM {outputs} o JOIN {table} s ON s.output_id = o.id "
                f"WHERE o.ref = t.n AND o.session_id = %s)",
                [wanted, [_like(t) for t in wanted], session.pk, session.pk],
            )
            return {row[0] for row in c.fetchall()}
    lowered = {t: t.lower() for t in wanted}
    found: set[str] = set()
    with connection.cursor() as c:
        c.execute(
            f"SELECT text, ref FROM {table} WHERE session_id + 0 = %s ORDER BY seq DESC, id "
            f"LIMIT {settings.CONTEXTSVC_RECALL_SCAN_SEGMENTS}",
            [session.pk],
        )
        while len(found) < len(wanted) and (rows := c.fetchmany(CANDIDATES)):
            for text, ref in rows:
                low = text.lower()
                found.update(t for t, t_low in lowered.items() if t_low in low or t == ref)
    return found
