"""The inspector's usage chart: what was sent at each turn, from the context-build records.

A bar whose turns have a ``ContextCall`` shows that record's components as
sent (the largest build of the bar): a later trim or compaction rewrites
today's messages, not what the model was sent then. Turns built before
records existed (or never built through the service) fall back to today's
per-message counts, and say so.

Compactions and restores (which restart the live window) come through the
registry from the app that keeps the snapshots; the chart draws them as marks.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass
from functools import cache

from django.db import connection

from sessions import accounting
from sessions.extensions import CLIENT_COMPACTION, REGISTRY, WindowEvent
from sessions.models import ContextCall, Message, Session, UsageReport

MAX_BARS = 80


@dataclass(slots=True)
class TurnUsage:
    first_turn: int
    last_turn: int
    first_seq: int
    last_seq: int
    overhead: int  # system + skills + tool descriptions (today's values)
    summary: int
    conversation: int  # non-tool messages in context at the end of the turn
    outputs: int  # tool results in context at the end of the turn
    reported: int | None = None  # provider-reported total (peak in the bucket)
    cache_read: int = 0
    cache_write: int = 0
    compactions: int = 0  # compactions (window restarts) at the end of these turns
    restores: int = 0
    trimmed: int = 0  # tool outputs of these turns now cut / trimmed / cleared / offloaded
    now: bool = False  # the synthetic last bar: the window right now, after a compaction
    last_event: str = ""  # kind of the last window change after these turns
    call_id: int | None = None  # the ContextCall drawn (None: recomputed from today's rows)
    calls: int = 0  # context builds recorded in these turns

    @property
    def total(self) -> int:
        return self.overhead + self.summary + self.conversation + self.outputs

    @property
    def peak(self) -> int:
        return max(self.total, self.reported or 0)

    @property
    def label(self) -> str:
        if self.now:
            return "Now (after the last compaction)"
        if self.first_turn == self.last_turn:
            return f"Turn {self.first_turn}"
        return f"Turns {self.first_turn}–{self.last_turn}"


PER_CALL_BELOW = 8  # user turns; fewer than this and the chart plots LLM calls


@dataclass(slots=True)
class UsageSeries:
    bars: list[TurnUsage]
    turns: int
    unit: str
    effective_window: int
    compact_at: int
    block_at: int
    has_reports: bool
    has_cache: bool
    events: list[WindowEvent]
    recorded: int = 0  # bars drawn from ContextCall records

    @property
    def has_compactions(self) -> bool:
        return any(e.kind != "restore" for e in self.events)

    @property
    def has_restores(self) -> bool:
        return any(e.kind == "restore" for e in self.events)

    @property
    def has_client_compactions(self) -> bool:
        return any(e.kind == CLIENT_COMPACTION for e in self.events)


def window_events(session: Session) -> list[WindowEvent]:
    """Every compaction and restore, oldest first: from the apps that keep them
    (compaction's snapshots, the proxy's client compactions; 1 query each)."""
    # Merged by seq, each source's own order kept: a restore may go back to
    # an earlier seq, and sorting the whole list would move it before the
    # compactions it follows.
    sources = [source(session) for source in REGISTRY.window_events]
    return list(heapq.merge(*sources, key=lambda e: e.after_seq))


TRIMMED_STATES = ("trimmed", "cleared", "offloaded", "cut")


def usage_over_turns(session: Session, *, max_bars: int = MAX_BARS) -> UsageSeries:
    """The context at the end of each turn, rebuilt from per-message counts: 3 queries.

    Context at the end of turn T = fixed prompt parts (today's system, skill
    and tool-description counts) + the summary in place then + every message
    of the live window then. Each compaction or restore (a snapshot) restarts
    the window at its start seq; the messages it kept stay counted. Provider
    reports, where the agent posted them, are drawn over it as the real figure.
    """
    budget = accounting.compute_budget(session).budget
    overhead = budget.system_prompt + budget.skill_prompts + budget.tool_descriptions
    events = window_events(session)
    rows = list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "token_count", "view_state")
    )
    # An agent working through one task is one user turn of hundreds of LLM
    # calls: one bar would say nothing. Below PER_CALL_BELOW user turns, a bar
    # is one LLM call (a guard evaluation: each request), starting at its
    # assistant message.
    by_call = sum(1 for row in rows if row[1] == "user") < PER_CALL_BELOW
    called = False  # by_call: the current bar already holds an answer
    turns: list[TurnUsage] = []
    conv = outs = summary = 0
    # Running totals at the seqs where a kept window starts or ends, to count
    # what each compaction kept (start … after).
    wanted = (
        {e.after_seq for e in events}
        | {e.start_seq - 1 for e in events}
        | {e.head_end_seq for e in events if e.head_end_seq}
    )
    conv_at: dict[int, int] = {0: 0}
    outs_at: dict[int, int] = {0: 0}
    totals = [0, 0]  # conversation, outputs over the whole transcript so far
    pending = list(events)
    turn_no = 0
    current: TurnUsage | None = None

    def apply(event: WindowEvent, last: bool) -> None:
        nonlocal conv, outs, summary
        before = event.start_seq - 1
        conv = conv_at.get(event.after_seq, totals[0]) - conv_at.get(before, 0)
        outs = outs_at.get(event.after_seq, totals[1]) - outs_at.get(before, 0)
        if 0 < event.head_end_seq < event.start_seq:
            # A sandwich's head stayed live before the gap
            # (docs/concepts/compaction.md#sandwich-head).
            conv += conv_at.get(event.head_end_seq, 0)
            outs += outs_at.get(event.head_end_seq, 0)
        if last:
            summary = budget.summary  # the summary in place now: exact
        elif event.tokens is not None:
            summary = max(0, event.tokens - conv - outs)
        else:
            summary = 0

    def mark(turn: TurnUsage, event: WindowEvent) -> None:
        if event.kind == "restore":
            turn.restores += 1
        else:
            turn.compactions += 1
        turn.last_event = event.kind

    for seq, role, tokens, view_state in rows:
        while pending and pending[0].after_seq < seq:
            event = pending.pop(0)
            apply(event, last=not pending)
            if current is not None:
                mark(current, event)
        if by_call:
            # A bar runs from one LLM call's answer to the next; what comes
            # before the first answer (the task) belongs to the first call.
            new_bar = current is None or (role == "assistant" and called)
            if new_bar:
                turn_no += 1
                called = False
            called = called or role == "assistant"
        else:
            new_bar = role == "user" or current is None
            if role == "user":
                turn_no += 1
        if new_bar:
            current = TurnUsage(
                first_turn=turn_no,
                last_turn=turn_no,
                first_seq=seq,
                last_seq=seq,
                overhead=overhead,
                summary=summary,
                conversation=0,
                outputs=0,
            )
            turns.append(current)
        if role == "tool":
            outs += tokens
            totals[1] += tokens
            if view_state in TRIMMED_STATES:
                current.trimmed += 1
        else:
            conv += tokens
            totals[0] += tokens
        if seq in wanted:
            conv_at[seq] = totals[0]
            outs_at[seq] = totals[1]
        current.last_seq = seq
        # The turn's peak: a compaction in the middle of a turn must not hide
        # how full the window got before it.
        if summary + conv + outs >= current.summary + current.conversation + current.outputs:
            current.conversation = conv
            current.outputs = outs
            current.summary = summary
    if pending and current is not None:
        # Compacted after the last message: mark the last turn, add the window as it is now.
        for event in pending:
            mark(current, event)
        apply(pending[-1], last=True)
        turns.append(
            TurnUsage(
                first_turn=turn_no,
                last_turn=turn_no,
                first_seq=current.last_seq,
                last_seq=current.last_seq,
                overhead=overhead,
                summary=summary,
                conversation=conv,
                outputs=outs,
                now=True,
            )
        )

    reports = (
        UsageReport.objects.filter(session=session)
        .order_by("through_seq", "id")
        .values_list("through_seq", "total_tokens", "cache_read_tokens", "cache_creation_tokens")
    )
    has_reports = has_cache = False
    real_turns = [t for t in turns if not t.now]
    if real_turns:
        starts = [t.first_seq for t in real_turns]
        for through, total, read, write in reports:
            t = real_turns[max(0, bisect_right(starts, through) - 1)]
            t.reported = max(t.reported or 0, total)
            t.cache_read += read
            t.cache_write += write
            has_reports = True
            has_cache = has_cache or bool(read or write)

    bars = _bucket(turns, max_bars)
    recorded = _as_sent(session, bars)
    return UsageSeries(
        bars=bars,
        turns=turn_no,
        unit="LLM call" if by_call else "turn",
        effective_window=budget.effective_window,
        compact_at=budget.compact_at,
        block_at=budget.block_at,
        has_reports=has_reports,
        has_cache=has_cache,
        events=events,
        recorded=recorded,
    )


# The largest build of each bar, chosen by the database: the records are
# placed in bars by the seq of their answer (``width_bucket`` over the bars'
# first seqs is ``bisect_right``), and one row per bar comes back — 10,000
# records are not read into Python to draw 80 bars. The columns read are in
# the covering index ``contextcall_session_cover`` (an index-only scan).
# ``max`` of (estimated input, id) pairs: the largest build, the newest of
# equals, in one hashed pass (no sort of every record).
_AS_SENT_SQL = """
SELECT bar, (max(ARRAY[{estimated}::bigint, {id}]))[2], count(*)
FROM (
    SELECT {id}, {estimated}, width_bucket(({through} + 1)::bigint, %s::bigint[]) AS bar
    FROM {table} WHERE {session} = %s
) placed
WHERE bar > 0
GROUP BY bar
"""


@cache
def _as_sent_sql() -> str:
    meta, qn = ContextCall._meta, connection.ops.quote_name
    column = {f.name: qn(f.column) for f in meta.concrete_fields}
    return _AS_SENT_SQL.format(
        table=qn(meta.db_table),
        id=column["id"],
        estimated=column["estimated_input"],
        through=column["through_seq"],
        session=column["session"],
    )


def _largest_per_bar(session: Session, starts: list[int]) -> dict[int, tuple[int, int]]:
    """call id -> (bar number from 1, calls in the bar), for the largest build of each bar."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_as_sent_sql(), [starts, session.pk])
            return {call_id: (bar, calls) for bar, call_id, calls in cursor.fetchall()}
    # Elsewhere (SQLite: a local run) the same choice, in Python.
    best: dict[int, tuple[int, int]] = {}  # bar -> (estimated_input, call id)
    calls: dict[int, int] = {}
    rows = ContextCall.objects.filter(session=session).order_by("id")
    for call_id, through, estimated in rows.values_list("id", "through_seq", "estimated_input"):
        bar = bisect_right(starts, through + 1)
        if bar == 0:
            continue
        calls[bar] = calls.get(bar, 0) + 1
        if bar not in best or estimated >= best[bar][0]:
            best[bar] = (estimated, call_id)
    return {call_id: (bar, calls[bar]) for bar, (_, call_id) in best.items()}


def _as_sent(session: Session, bars: list[TurnUsage]) -> int:
    """Draw each bar from the largest context build answered in it: 2 queries
    (the build of each bar, then the components of those, at most ``MAX_BARS``).

    The request built after message T is answered by message T + 1: a call
    belongs to the bar holding its answer (a bar of one LLM call starts at its
    answer); a call not answered yet belongs to the last bar. Of equal builds
    the newest is drawn.
    """
    real = [b for b in bars if not b.now]
    if not real:
        return 0
    best = _largest_per_bar(session, [b.first_seq for b in real])
    if not best:
        return 0
    # order_by(): the model's ordering would join the session table for nothing.
    components = (
        ContextCall.objects.filter(pk__in=list(best)).order_by().values_list("id", "components")
    )
    for call_id, c in components:
        bar_no, calls = best[call_id]
        bar = real[bar_no - 1]
        c = c or {}
        outputs = int(c.get("outputs", 0))
        bar.calls = calls
        bar.overhead = (
            int(c.get("system_prompt", 0))
            + int(c.get("skill_prompts", 0))
            + int(c.get("tool_descriptions", 0))
        )
        bar.summary = int(c.get("summary", 0))
        bar.conversation = max(0, int(c.get("conversation", 0)) - outputs)
        bar.outputs = outputs
        bar.call_id = call_id
    return len(best)


def _bucket(turns: list[TurnUsage], max_bars: int) -> list[TurnUsage]:
    """Merge neighbouring turns so at most ``max_bars`` remain; each keeps its peak."""
    if len(turns) <= max_bars:
        return turns
    if turns[-1].now:
        return [*_bucket(turns[:-1], max_bars - 1), turns[-1]]
    size = -(-len(turns) // max_bars)
    out = []
    for i in range(0, len(turns), size):
        group = turns[i : i + size]
        peak = max(group, key=lambda t: t.total)
        reported = [t.reported for t in group if t.reported is not None]
        out.append(
            TurnUsage(
                first_turn=group[0].first_turn,
                last_turn=group[-1].last_turn,
                first_seq=group[0].first_seq,
                last_seq=group[-1].last_seq,
                overhead=peak.overhead,
                summary=peak.summary,
                conversation=peak.conversation,
                outputs=peak.outputs,
                reported=max(reported) if reported else None,
                cache_read=sum(t.cache_read for t in group),
                cache_write=sum(t.cache_write for t in group),
                compactions=sum(t.compactions for t in group),
                restores=sum(t.restores for t in group),
                last_event=next((t.last_event for t in reversed(group) if t.last_event), ""),
                trimmed=sum(t.trimmed for t in group),
                now=group[-1].now and len(group) == 1,
            )
        )
    return out
