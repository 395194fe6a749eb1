"""Reads for the operator dashboard.

Operators see every session, whatever agent key owns it, so these selectors
take no owner (the API's ``selectors.py`` always does). Every function here
runs a fixed number of queries whatever the session's size: the budget comes
from the session row's cached counters, the timeline reads one page of
messages, and long texts are cut in the database (``Substr``) so a page of
50 KB tool outputs does not ship megabytes to Python.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, ExpressionWrapper, F, FloatField, Max, Min, Q, QuerySet, Sum
from django.db.models.functions import Greatest, Length, Substr
from django.http import Http404

from . import accounting
from .models import AgentKey, Message, Session, UsageReport

# --- sessions list ---------------------------------------------------------------

GUARD_STATUSES = ("ok", "compact", "block", "final")
SORTS = {
    "activity": ("-updated_at", "-id"),
    "usage": ("-usage_ratio", "-updated_at"),
    "messages": ("-message_count", "-updated_at"),
    "id": ("external_id", "id"),
    "created": ("-created_at", "-id"),
}
PER_PAGE = 25


@dataclass(frozen=True, slots=True)
class SessionFilters:
    q: str = ""
    agent: str = ""
    status: str = ""  # a guard status, or "" for all
    sort: str = "activity"
    page: int = 1
    key: int | None = None  # an agent key's pk

    @property
    def active(self) -> bool:
        return bool(self.q or self.agent or self.status or self.key)


def _with_usage_ratio(qs: QuerySet[Session]) -> QuerySet[Session]:
    # used / effective window; Greatest() keeps a broken row from dividing by 0.
    effective = Greatest(F("context_window") - F("buffer_tokens") - F("max_output_tokens"), 1)
    return qs.annotate(
        usage_ratio=ExpressionWrapper(F("used_tokens") * 1.0 / effective, output_field=FloatField())
    )


def session_page(filters: SessionFilters, *, per_page: int = PER_PAGE) -> Page:
    """One page of sessions across all keys: 2 queries (count + rows)."""
    qs = _with_usage_ratio(Session.objects.select_related("owner"))
    if filters.q:
        qs = qs.filter(Q(external_id__icontains=filters.q) | Q(agent__icontains=filters.q))
    if filters.agent:
        qs = qs.filter(agent=filters.agent)
    if filters.key:
        qs = qs.filter(owner_id=filters.key)
    if filters.status == "final":
        qs = qs.filter(Q(guard_status="final") | Q(status=Session.Status.FINAL))
    elif filters.status in GUARD_STATUSES:
        qs = qs.filter(guard_status=filters.status).exclude(status=Session.Status.FINAL)
    qs = qs.order_by(*SORTS.get(filters.sort, SORTS["activity"]))
    paginator = Paginator(qs, per_page)
    return paginator.get_page(filters.page)


def session_agents() -> list[str]:
    return list(
        Session.objects.exclude(agent="")
        .order_by("agent")
        .values_list("agent", flat=True)
        .distinct()
    )


def display_status(session: Session) -> str:
    """The badge: a session marked final stays final whatever the counters say."""
    if session.status == Session.Status.FINAL:
        return "final"
    return session.guard_status or "ok"


def usable_tokens(session: Session) -> int:
    """The effective window: window − buffer − reserved output (spec 001's limit)."""
    return max(1, session.context_window - session.buffer_tokens - session.max_output_tokens)


def usage_pct(session: Session) -> float:
    return round(100 * session.used_tokens / usable_tokens(session), 1)


def session_for_operator(pk: int) -> Session:
    session = Session.objects.select_related("owner").filter(pk=pk).first()
    if session is None:
        raise Http404("No such session")
    return session


# --- budget breakdown -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    key: str
    label: str
    tokens: int
    pct_window: float  # of the whole context window (the bar's width)
    pct_effective: float | None  # of the effective window (None for reserved/buffer)
    in_use: bool  # counts towards "used"


@dataclass(frozen=True, slots=True)
class BudgetView:
    segments: list[Segment]
    bar_total: int
    context_window: int
    effective_window: int
    used: int
    remaining: int
    used_pct: float
    compact_at: int
    block_at: int
    compact_pct: float  # line positions on the bar, % of bar_total
    block_pct: float
    effective_pct: float
    compact_ratio: float
    block_ratio: float
    status: str
    guard_projected: int
    guard_limit: int
    estimated: int
    calibrated: int | None
    reserved_tool_tokens: int
    last_report: UsageReport | None
    tool_output_messages: int

    @property
    def visible_segments(self) -> list[Segment]:
        return [s for s in self.segments if s.tokens > 0]

    @property
    def over(self) -> bool:
        return self.used > self.effective_window

    @property
    def projected_pct(self) -> float | None:
        """Where the guard's projection sits on the bar, when it is not our
        estimate (provider-calibrated, or with reserved tool tokens)."""
        if self.guard_projected == self.used:
            return None
        return min(100.0, _pct(self.guard_projected, self.bar_total))


def _pct(part: int, whole: int) -> float:
    return round(100 * part / whole, 2) if whole else 0.0


def budget_view(session: Session) -> BudgetView:
    """The stacked bar and its table: 2 queries (tool-output sum, last usage report)."""
    state = accounting.compute_budget(session)
    budget = state.budget
    tool_agg = Message.objects.filter(
        session=session, seq__gte=session.window_start_seq, role=Message.Role.TOOL
    ).aggregate(tokens=Sum("token_count"), n=Count("id"))
    tool_out = min(int(tool_agg["tokens"] or 0), budget.conversation)
    last_report = UsageReport.objects.filter(session=session).order_by("-id").first()

    limits = budget.limits
    effective = budget.effective_window
    free = max(0, effective - budget.used)
    bar_total = max(
        limits.context_window, budget.used + limits.buffer_tokens + limits.max_output_tokens
    )

    def seg(
        key: str, label: str, tokens: int, *, in_use: bool = True, of_effective: bool = True
    ) -> Segment:
        return Segment(
            key=key,
            label=label,
            tokens=tokens,
            pct_window=_pct(tokens, bar_total),
            pct_effective=_pct(tokens, effective) if of_effective else None,
            in_use=in_use,
        )

    segments = [
        seg("system", "System prompt", budget.system_prompt),
        seg("skills", "Skills", budget.skill_prompts),
        seg("tools", "Tool descriptions", budget.tool_descriptions),
        seg("summary", "Summary", budget.summary),
        seg("conversation", "Conversation", budget.conversation - tool_out),
        seg("outputs", "Tool outputs", tool_out),
        seg("free", "Free", free, in_use=False),
        seg("buffer", "Buffer", limits.buffer_tokens, in_use=False, of_effective=False),
        seg(
            "reserved",
            "Reserved output",
            limits.max_output_tokens,
            in_use=False,
            of_effective=False,
        ),
    ]
    return BudgetView(
        segments=segments,
        bar_total=bar_total,
        context_window=limits.context_window,
        effective_window=effective,
        used=budget.used,
        remaining=budget.remaining,
        used_pct=budget.used_pct,
        compact_at=budget.compact_at,
        block_at=budget.block_at,
        compact_pct=_pct(budget.compact_at, bar_total),
        block_pct=_pct(budget.block_at, bar_total),
        effective_pct=_pct(effective, bar_total),
        compact_ratio=budget.thresholds.compact_ratio,
        block_ratio=budget.thresholds.block_ratio,
        status="final" if session.status == Session.Status.FINAL else state.guard.status,
        guard_projected=state.guard.projected,
        guard_limit=state.guard.limit,
        estimated=state.estimated,
        calibrated=state.calibrated,
        reserved_tool_tokens=state.reserved,
        last_report=last_report,
        tool_output_messages=int(tool_agg["n"] or 0),
    )


# --- timeline -------------------------------------------------------------------

PREVIEW_CHARS = 1200
TIMELINE_PAGE = 40  # messages per page (a page may run a little longer to end on a turn)
TIMELINE_SLACK = 30  # how much longer, at most


@dataclass(slots=True)
class TimelineMessage:
    seq: int
    role: str
    text: str  # preview of what the model sees (view when there is one, else content)
    text_len: int
    truncated: bool
    full_len: int  # length of the stored content
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    name: str | None
    reasoning: str | None
    reasoning_len: int
    output_ref: str | None
    view_state: str
    token_count: int
    created_at: Any
    compacted: bool  # before the live window: summarised away
    has_parts: bool

    @property
    def badges(self) -> list[str]:
        out = []
        if self.view_state and self.view_state != "full":
            out.append(self.view_state)
        if self.output_ref and self.view_state == "full":
            out.append("stored")
        if self.compacted:
            out.append("summarised")
        return out

    @property
    def more_chars(self) -> int:
        return max(0, self.text_len - len(self.text))

    @property
    def expandable(self) -> bool:
        return bool(self.output_ref) or self.truncated or self.view_state != "full"


@dataclass(slots=True)
class CallPair:
    id: str
    name: str
    arguments: str  # pretty JSON, cut
    result: TimelineMessage | None = None


@dataclass(slots=True)
class Step:
    """A user message, an assistant message with its paired tool results, or an orphan result."""

    message: TimelineMessage
    calls: list[CallPair] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.message.token_count + sum(c.result.token_count for c in self.calls if c.result)

    @property
    def kind(self) -> str:
        return self.message.role


@dataclass(slots=True)
class Turn:
    number: int  # 1-based user turn; 0 for messages before the first user message
    steps: list[Step]
    continued: bool  # the turn started on an older page
    first_seq: int
    last_seq: int

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.steps)

    @property
    def message_count(self) -> int:
        return sum(1 + sum(1 for c in s.calls if c.result) for s in self.steps)

    @property
    def tool_calls(self) -> int:
        return sum(len(s.calls) for s in self.steps)


@dataclass(slots=True)
class TimelinePage:
    turns: list[Turn]  # newest first
    before: int | None  # cursor for the next (older) page
    newest_seq: int


def _timeline_values(qs: QuerySet[Message]) -> QuerySet:
    return qs.annotate(
        text_preview=Substr("content", 1, PREVIEW_CHARS),
        text_len=Length("content"),
        view_preview=Substr("view", 1, PREVIEW_CHARS),
        view_len=Length("view"),
        reasoning_preview=Substr("reasoning", 1, PREVIEW_CHARS),
        reasoning_len=Length("reasoning"),
    ).values(
        "seq",
        "role",
        "text_preview",
        "text_len",
        "view_preview",
        "view_len",
        "tool_calls",
        "tool_call_id",
        "name",
        "reasoning_preview",
        "reasoning_len",
        "output_ref",
        "view_state",
        "token_count",
        "created_at",
        "parts",
    )


def _arguments_preview(arguments: Any, limit: int = 800) -> str:
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments, indent=2, ensure_ascii=False)
    )
    return text if len(text) <= limit else text[:limit] + " …"


def _to_timeline(row: dict[str, Any], window_start: int) -> TimelineMessage:
    has_view = row["view_len"] is not None
    text = row["view_preview"] if has_view else row["text_preview"]
    text_len = row["view_len"] if has_view else row["text_len"]
    return TimelineMessage(
        seq=row["seq"],
        role=row["role"],
        text=text or "",
        text_len=text_len or 0,
        truncated=(text_len or 0) > PREVIEW_CHARS,
        full_len=row["text_len"] or 0,
        tool_calls=list(row["tool_calls"] or ()),
        tool_call_id=row["tool_call_id"],
        name=row["name"],
        reasoning=row["reasoning_preview"],
        reasoning_len=row["reasoning_len"] or 0,
        output_ref=row["output_ref"],
        view_state=row["view_state"],
        token_count=row["token_count"],
        created_at=row["created_at"],
        compacted=row["seq"] < window_start,
        has_parts=row["parts"] is not None,
    )


def _page_rows(
    rows_desc: list[dict[str, Any]], limit: int, *, older: bool
) -> tuple[list[dict[str, Any]], bool]:
    """Choose where an older-going page stops, given rows newest first; → (page, more).

    Prefer ending on a user message (a whole turn) within the slack; never end
    on a tool result, whose call would fall on the next page. ``older``: the
    database holds rows older than the ones given.
    """
    if len(rows_desc) <= limit:
        return rows_desc, older
    for i in range(limit - 1, len(rows_desc)):
        if rows_desc[i]["role"] == "user":
            return rows_desc[: i + 1], i + 1 < len(rows_desc) or older
    # No user message close by: at least don't separate results from their call.
    end = limit
    while end < len(rows_desc) and rows_desc[end - 1]["role"] == "tool":
        end += 1
    return rows_desc[:end], end < len(rows_desc) or older


def timeline_page(
    session: Session, *, before: int | None = None, limit: int = TIMELINE_PAGE
) -> TimelinePage:
    """One page of the timeline, newest turns first: 2 queries.

    Seqs are contiguous from 1 (the transcript is append-only), so a page is a
    seq range: an index range scan of (session, seq) that reads ~70 rows
    whatever the session's size, even when the planner's statistics are stale
    (an ORDER BY … LIMIT can otherwise sort the whole session first).
    """
    upper = min(before, session.last_seq + 1) if before is not None else session.last_seq + 1
    lower = max(1, upper - (limit + TIMELINE_SLACK))
    qs = Message.objects.filter(session=session, seq__gte=lower, seq__lt=upper)
    rows_desc = list(_timeline_values(qs.order_by("-seq")))
    rows_desc, more = _page_rows(rows_desc, limit, older=lower > 1)
    if not rows_desc:
        return TimelinePage(turns=[], before=None, newest_seq=session.last_seq)
    oldest = rows_desc[-1]["seq"]
    # Turn numbers: user messages up to and including the page's oldest message.
    users_before = Message.objects.filter(
        session=session, role=Message.Role.USER, seq__lte=oldest
    ).count()

    messages = [_to_timeline(r, session.window_start_seq) for r in reversed(rows_desc)]
    turns: list[Turn] = []
    number = users_before - (1 if messages[0].role == "user" else 0)
    current: Turn | None = None
    open_calls: dict[str, CallPair] = {}
    for msg in messages:
        if msg.role == "user" or current is None:
            if msg.role == "user":
                number += 1
            current = Turn(
                number=number,
                steps=[],
                continued=msg.role != "user",
                first_seq=msg.seq,
                last_seq=msg.seq,
            )
            turns.append(current)
        current.last_seq = msg.seq
        if msg.role == "tool" and msg.tool_call_id in open_calls:
            open_calls.pop(msg.tool_call_id).result = msg
            continue
        step = Step(message=msg)
        if msg.role == "assistant":
            for call in msg.tool_calls:
                pair = CallPair(
                    id=str(call.get("id", "")),
                    name=str(call.get("name", "")),
                    arguments=_arguments_preview(call.get("arguments") or {}),
                )
                step.calls.append(pair)
                open_calls[pair.id] = pair
        current.steps.append(step)
    turns.reverse()
    return TimelinePage(
        turns=turns, before=oldest if more else None, newest_seq=rows_desc[0]["seq"]
    )


def message_for_operator(session: Session, seq: int) -> Message:
    msg = Message.objects.filter(session=session, seq=seq).first()
    if msg is None:
        raise Http404("No such message")
    return msg


# --- usage over turns -----------------------------------------------------------

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


@dataclass(frozen=True, slots=True)
class WindowEvent:
    """The live window changed after message ``after_seq``: it now starts at
    ``start_seq``, with ``tokens`` of preamble + kept messages (a snapshot)."""

    after_seq: int
    start_seq: int
    tokens: int | None
    kind: str  # compaction / restore


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

    @property
    def has_compactions(self) -> bool:
        return any(e.kind != "restore" for e in self.events)

    @property
    def has_restores(self) -> bool:
        return any(e.kind == "restore" for e in self.events)


def window_events(session: Session) -> list[WindowEvent]:
    """Every compaction and restore, oldest first, from issue 4's snapshots: 1 query."""
    from compaction.models import Snapshot

    rows = (
        Snapshot.objects.filter(session=session)
        .order_by("id")
        .values_list("through_seq", "window_start_seq", "token_count", "kind")
    )
    return [WindowEvent(after, start, tokens, kind) for after, start, tokens, kind in rows]


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
    # is one LLM call (spec 001's "turn": each request), starting at its
    # assistant message.
    by_call = sum(1 for row in rows if row[1] == "user") < PER_CALL_BELOW
    called = False  # by_call: the current bar already holds an answer
    turns: list[TurnUsage] = []
    conv = outs = summary = 0
    # Running totals at the seqs where a kept window starts or ends, to count
    # what each compaction kept (start … after).
    wanted = {e.after_seq for e in events} | {e.start_seq - 1 for e in events}
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

    return UsageSeries(
        bars=_bucket(turns, max_bars),
        turns=turn_no,
        unit="LLM call" if by_call else "turn",
        effective_window=budget.effective_window,
        compact_at=budget.compact_at,
        block_at=budget.block_at,
        has_reports=has_reports,
        has_cache=has_cache,
        events=events,
    )


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


# --- agent keys -----------------------------------------------------------------


def agent_keys() -> list[AgentKey]:
    """Every key with its session count and latest activity: 1 query."""
    return list(
        AgentKey.objects.annotate(
            session_count=Count("sessions"), last_session_at=Max("sessions__updated_at")
        ).order_by("revoked_at", "name", "id")
    )


def agent_key_for_operator(pk: int) -> AgentKey:
    key = AgentKey.objects.filter(pk=pk).first()
    if key is None:
        raise Http404("No such key")
    return key


def agent_key_or_none(pk: int | None) -> AgentKey | None:
    return AgentKey.objects.filter(pk=pk).first() if pk else None


def recent_usage_reports(session: Session, limit: int = 5) -> Iterable[UsageReport]:
    return UsageReport.objects.filter(session=session).order_by("-id")[:limit]


# --- built context ----------------------------------------------------------------

CONTEXT_PAGE = 25  # messages of the built body shown per page
BLOCK_CHARS = 3000


@dataclass(slots=True)
class ContextBlock:
    kind: str  # text, tool_use, tool_result, image, tool, system, ...
    label: str
    text: str
    more_chars: int
    cache: str | None  # "ephemeral", "ephemeral · 1h", ... when the block carries a breakpoint


@dataclass(slots=True)
class ContextMessage:
    index: int
    role: str
    blocks: list[ContextBlock]

    @property
    def has_breakpoint(self) -> bool:
        return any(b.cache for b in self.blocks)


@dataclass(slots=True)
class ContextView:
    fmt: str
    model: str
    max_tokens: int
    system: list[ContextBlock]
    tools: list[ContextBlock]
    messages: list[ContextMessage]
    total_messages: int
    start: int  # index of the first message shown
    breakpoints: list[str]
    budget: dict[str, Any]
    final_instruction: bool
    cache: dict[str, Any] | None = None
    deferral: dict[str, Any] | None = None


def _cut(text: str, limit: int = BLOCK_CHARS) -> tuple[str, int]:
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def _cache_label(block: Any) -> str | None:
    if not isinstance(block, dict) or "cache_control" not in block:
        return None
    cc = block["cache_control"] or {}
    label = str(cc.get("type", "ephemeral"))
    if cc.get("ttl"):
        label += f" · {cc['ttl']}"
    return label


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _content_blocks(content: Any) -> list[ContextBlock]:
    if content is None:
        return []
    if isinstance(content, str):
        text, more = _cut(content)
        return [ContextBlock("text", "text", text, more, None)]
    blocks = []
    for block in content:
        kind = block.get("type", "text") if isinstance(block, dict) else "text"
        if kind == "text":
            raw, label = block.get("text", ""), "text"
        elif kind == "tool_use":
            raw, label = (
                _json(block.get("input", {})),
                f"tool_use · {block.get('name')} · {block.get('id')}",
            )
        elif kind == "tool_result":
            inner = block.get("content")
            raw = inner if isinstance(inner, str) else _json(inner)
            label = f"tool_result · {block.get('tool_use_id')}"
        else:
            raw, label = _json(block), kind
        text, more = _cut(raw)
        blocks.append(ContextBlock(kind, label, text, more, _cache_label(block)))
    return blocks


def _openai_blocks(msg: dict[str, Any]) -> list[ContextBlock]:
    blocks = _content_blocks(msg.get("content"))
    if msg.get("tool_call_id"):
        for b in blocks:
            b.kind, b.label = "tool_result", f"tool · {msg['tool_call_id']}"
    for call in msg.get("tool_calls") or ():
        fn = call.get("function", {})
        text, more = _cut(fn.get("arguments", ""))
        blocks.append(
            ContextBlock(
                "tool_use", f"tool_call · {fn.get('name')} · {call.get('id')}", text, more, None
            )
        )
    return blocks


def context_view(
    session: Session, fmt: str, *, start: int | None = None, page: int = CONTEXT_PAGE
) -> ContextView:
    """The body ``GET /context`` returns, laid out for reading.

    Built by the same selector the API uses (``selectors.session_context``),
    so what the operator reads is byte for byte what the agent gets; only the
    display is cut (long blocks, messages shown a page at a time).
    """
    body = context_body(session, fmt)
    messages = body.get("messages") or []
    system: list[ContextBlock] = []
    breakpoints: list[str] = []
    if fmt == "anthropic":
        for i, block in enumerate(body.get("system") or []):
            text, more = _cut(block.get("text", ""))
            cache = _cache_label(block)
            system.append(ContextBlock("system", f"system[{i}]", text, more, cache))
            if cache:
                breakpoints.append(f"system[{i}]")
    elif messages and messages[0].get("role") == "system":
        text, more = _cut(messages[0].get("content") or "")
        system.append(ContextBlock("system", "messages[0] · system", text, more, None))
        messages = messages[1:]

    tools = []
    for i, tool in enumerate(body.get("tools") or []):
        fn = tool.get("function", tool)
        schema = fn.get("input_schema", fn.get("parameters", {}))
        text, more = _cut(f"{fn.get('description', '')}\n\n{_json(schema)}")
        cache = _cache_label(tool)
        tools.append(ContextBlock("tool", fn.get("name", "?"), text, more, cache))
        if cache:
            breakpoints.append(f"tools[{i}] ({fn.get('name')})")

    offset = 1 if fmt == "openai" and system else 0
    total = len(messages)
    for i, msg in enumerate(messages):
        content = msg.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and "cache_control" in b for b in content
        ):
            breakpoints.append(f"messages[{i + offset}]")
    if start is None:
        start = max(0, total - page)
    start = min(max(0, start), total)
    shown = []
    for i, msg in enumerate(messages[start : start + page], start=start):
        blocks = _content_blocks(msg.get("content")) if fmt == "anthropic" else _openai_blocks(msg)
        shown.append(ContextMessage(index=i + offset, role=msg.get("role", "?"), blocks=blocks))
    return ContextView(
        fmt=fmt,
        model=body.get("model", ""),
        max_tokens=body.get("max_tokens", 0),
        system=system,
        tools=tools,
        messages=shown,
        total_messages=total,
        start=start,
        breakpoints=breakpoints,
        budget=body.get("budget", {}),
        final_instruction=bool(session.status == Session.Status.FINAL),
        cache=_cache_info(body.get("budget", {})),
        deferral=_deferral_info(body.get("budget", {})),
    )


def _cache_info(budget: dict[str, Any]) -> dict[str, Any] | None:
    """This build's cache estimate (issue 6's ``budget.cache.last_build``), if any."""
    cache = budget.get("cache")
    if not isinstance(cache, dict):
        return None
    build = cache.get("last_build") if isinstance(cache.get("last_build"), dict) else None
    if build is None:
        return None
    marks = build.get("breakpoints") or {}
    return {
        "mode": build.get("mode"),
        "input_tokens": build.get("input_tokens") or 0,
        "read": build.get("cache_read_tokens") or 0,
        "write": build.get("cache_write_tokens") or 0,
        "uncached": build.get("uncached_input_tokens") or 0,
        "prefix_tokens": marks.get("prefix_tokens") or [],
        "ttl": marks.get("ttl") or cache.get("ttl"),
        "cost": build.get("input_cost_usd") if build.get("priced") else None,
    }


def _deferral_info(budget: dict[str, Any]) -> dict[str, Any] | None:
    deferral = budget.get("deferral")
    if not isinstance(deferral, dict) or not deferral.get("deferred_count"):
        return None
    return deferral


def context_body(session: Session, fmt: str) -> dict[str, Any]:
    """``GET /context``'s body. ``record=False`` (issue 6): an operator looking
    must not count as a build in the session's cache accounting."""
    import inspect

    from . import selectors

    if "record" in inspect.signature(selectors.session_context).parameters:
        return selectors.session_context(session, fmt, record=False)
    return selectors.session_context(session, fmt)


# --- stored tool outputs (issue 3's store, the one the agent tools read) ---------------

OUTPUT_PAGE_LINES = 200
OUTPUT_LINE_CHARS = 2000  # a line longer than this is cut in the viewer (spec 000 §1.3's default)
GREP_MAX_MATCHES = 200
HIGHLIGHT_TIMEOUT = 0.5  # seconds for all highlighting of one grep answer


def output_for_operator(session: Session, ref: str):
    from .models import ToolOutput

    output = ToolOutput.objects.filter(session=session, ref=ref, sha256__isnull=False).first()
    if output is None:
        raise Http404("No such output")
    return output


@dataclass(frozen=True, slots=True)
class OutputLine:
    number: int
    text: str
    cut: bool = False
    target: bool = False


def _parse_slice_text(text: str, cut_lines: Iterable[int], target: int | None) -> list[OutputLine]:
    """``output_slice`` numbers lines like a read tool (``"{n:>6}\\t{text}"``); split them back."""
    from .output_store import CUT_MARK

    cut = set(cut_lines)
    lines = []
    for entry in text.split("\n") if text else ():
        number, _, body = entry.partition("\t")
        n = int(number)
        if n in cut and body.endswith(CUT_MARK):
            body = body[: -len(CUT_MARK)]
        lines.append(OutputLine(number=n, text=body, cut=n in cut, target=n == target))
    return lines


def output_lines(
    output, *, offset: int = 1, limit: int = OUTPUT_PAGE_LINES, target: int | None = None
) -> dict[str, Any]:
    """A line range through ``output_store.output_slice`` (what ``GET /refs/{ref}`` serves)."""
    from .output_store import output_slice

    result = output_slice(output, offset=offset, limit=limit, max_line_length=OUTPUT_LINE_CHARS)
    lines = _parse_slice_text(result["text"], result["cut_lines"], target)
    first = lines[0].number if lines else result["offset"]
    return {
        **result,
        "line_rows": lines,
        "first": first,
        "last": lines[-1].number if lines else first - 1,
        "prev_offset": max(1, first - limit) if first > 1 else None,
        "target": target,
    }


@dataclass(frozen=True, slots=True)
class GrepLine:
    number: int
    segments: list[tuple[str, bool]]  # (text, is a match)
    is_match: bool


def _highlight(text: str, rx: Any, deadline: float) -> list[tuple[str, bool]]:
    import time

    segments: list[tuple[str, bool]] = []
    pos = 0
    try:
        for m in rx.finditer(text, timeout=max(0.001, deadline - time.monotonic())):
            if m.end() == m.start():
                continue
            if m.start() > pos:
                segments.append((text[pos : m.start()], False))
            segments.append((text[m.start() : m.end()], True))
            pos = m.end()
    except TimeoutError:
        pass  # highlighting is cosmetic: the lines themselves already matched
    if pos < len(text):
        segments.append((text[pos:], False))
    return segments or [("", False)]


def output_grep_view(
    output,
    *,
    pattern: str,
    context: int = 2,
    ignore_case: bool = False,
    max_matches: int = GREP_MAX_MATCHES,
) -> dict[str, Any]:
    """Matches through ``output_store.output_grep`` (what ``GET /refs/{ref}/grep`` serves),
    grouped like ``grep -n`` with the matched text marked."""
    import time

    import regex

    from .output_store import output_grep

    result = output_grep(
        output, pattern=pattern, context=context, max_matches=max_matches, ignore_case=ignore_case
    )
    flags = regex.MULTILINE | (regex.IGNORECASE if ignore_case else 0)
    rx = regex.compile(pattern, flags)
    deadline = time.monotonic() + HIGHLIGHT_TIMEOUT
    groups: list[list[GrepLine]] = []
    printed = 0
    for m in result["matches"]:
        rows = [(b["line"], b["text"], False) for b in m["before"]]
        rows.append((m["line"], m["text"], True))
        rows.extend((a["line"], a["text"], False) for a in m["after"])
        if m["line"] <= printed and groups:
            # Already printed as context of the previous match: mark it there.
            last = groups[-1]
            for i, row in enumerate(last):
                if row.number == m["line"]:
                    last[i] = GrepLine(m["line"], _highlight(m["text"], rx, deadline), True)
        fresh = [r for r in rows if r[0] > printed]
        if not fresh:
            continue
        if not groups or fresh[0][0] > printed + 1:
            groups.append([])
        for number, text, is_match in fresh:
            segments = _highlight(text, rx, deadline) if is_match else [(text, False)]
            groups[-1].append(GrepLine(number=number, segments=segments, is_match=is_match))
        printed = fresh[-1][0]
    return {**result, "groups": groups}


# --- compaction (issue 4's runs and snapshots) -------------------------------------------

STRATEGY_LABELS = {
    "chain": "Default chain",
    "tool_clearing": "Tool clearing only",
    "summarize": "Summarise",
    "sandwich": "Sandwich (top + bottom)",
    "drop_oldest_turns": "Drop oldest turns",
}
HISTORY_LIMIT = 20


def compaction_runs(session: Session, *, limit: int = HISTORY_LIMIT) -> list[Any]:
    """Newest runs with their snapshot ids: 1 query (snapshot messages deferred)."""
    from compaction.models import CompactionRun

    return list(
        CompactionRun.objects.filter(session=session)
        .select_related("snapshot")
        .defer("snapshot__messages", "reports")
        .order_by("-created_at")[:limit]
    )


def active_run(session: Session) -> Any | None:
    from compaction.models import CompactionRun

    return (
        CompactionRun.objects.filter(session=session, status__in=CompactionRun.ACTIVE)
        .order_by("-created_at")
        .first()
    )


def run_for_operator(session: Session, run_id: Any) -> Any:
    import uuid

    from compaction.models import CompactionRun

    try:
        pk = uuid.UUID(str(run_id))
    except ValueError:
        raise Http404("No such compaction run") from None
    run = CompactionRun.objects.filter(session=session, pk=pk).first()
    if run is None:
        raise Http404("No such compaction run")
    return run


def restore_snapshots(session: Session, *, limit: int = HISTORY_LIMIT) -> list[Any]:
    """Restore snapshots (they have no run), newest first: 1 query."""
    from compaction.models import Snapshot

    return list(
        Snapshot.objects.filter(session=session, kind=Snapshot.Kind.RESTORE)
        .defer("messages")
        .order_by("-id")[:limit]
    )


def snapshot_for_operator(session: Session, snapshot_id: int) -> Any:
    from compaction.models import Snapshot

    snapshot = Snapshot.objects.filter(session=session, pk=snapshot_id).first()
    if snapshot is None:
        raise Http404("No such snapshot")
    return snapshot


@dataclass(slots=True)
class SnapshotDiff:
    snapshot: Any
    run: Any | None
    before_start: int
    removed_count: int
    removed_tokens: int
    removed_first: int | None
    removed_last: int | None
    view_changes: list[dict[str, Any]]
    kept: list[dict[str, Any]]
    kept_more: int
    summary_tokens: int


KEPT_SHOWN = 60


def snapshot_diff(session: Session, snapshot: Any) -> SnapshotDiff:
    """Before/after of one snapshot's window: 3 queries whatever the window's size.

    Before = the window the compaction started from (``base_window_start_seq`` …
    ``through_seq``); after = retain + summary + the kept messages, with the views
    the compaction changed (``ViewChange``: old → new state and tokens).
    """
    from compaction.models import ViewChange

    run = snapshot.run if snapshot.run_id else None
    before_start = run.base_window_start_seq if run and run.base_window_start_seq else 1
    removed = Message.objects.filter(
        session=session, seq__gte=before_start, seq__lt=snapshot.window_start_seq
    ).aggregate(n=Count("id"), tokens=Sum("token_count"), first=Min("seq"), last=Max("seq"))
    changes = [
        {
            "seq": c.seq,
            "old_state": c.old_state,
            "new_state": c.new_state,
            "old_tokens": c.old_tokens,
            "new_tokens": c.new_tokens,
        }
        for c in ViewChange.objects.filter(snapshot=snapshot).order_by("seq")[:200]
    ]
    messages = snapshot.messages or []
    kept = [
        {
            "seq": m.get("seq"),
            "role": m.get("role"),
            "view": m.get("view", "full"),
            "tokens": m.get("token_count") or 0,
            "preview": _snapshot_preview(m),
        }
        for m in messages[-KEPT_SHOWN:]
    ]
    kept_tokens = sum(m.get("token_count") or 0 for m in messages)
    return SnapshotDiff(
        snapshot=snapshot,
        run=run,
        before_start=before_start,
        removed_count=int(removed["n"] or 0),
        removed_tokens=int(removed["tokens"] or 0),
        removed_first=removed["first"],
        removed_last=removed["last"],
        view_changes=changes,
        kept=kept,
        kept_more=max(0, len(messages) - KEPT_SHOWN),
        summary_tokens=max(0, snapshot.token_count - kept_tokens),
    )


def _snapshot_preview(m: dict[str, Any], limit: int = 160) -> str:
    content = m.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    text = " ".join(str(content or "").split())
    if not text and m.get("tool_calls"):
        text = "→ " + ", ".join(str(c.get("name")) for c in m["tool_calls"])
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(slots=True)
class CompactionPreview:
    chain: list[str]
    changed: bool
    before_tokens: int
    after_tokens: int
    before_msgs: int
    after_msgs: int
    strategies_run: list[str]
    removed_count: int
    removed_tokens: int
    removed_first: int | None
    removed_last: int | None
    changed_views: list[dict[str, Any]]
    kept_first: int | None
    kept_last: int | None
    retention: dict[str, Any] | None
    summarizer_note: str

    @property
    def saved_pct(self) -> float:
        return (
            round(100 * (self.before_tokens - self.after_tokens) / self.before_tokens, 1)
            if self.before_tokens
            else 0.0
        )


def compaction_preview(
    session: Session, *, strategy: str, instructions: str = "", retain_last_turns: int | None = None
) -> CompactionPreview:
    """What a manual compaction would do, computed now without changing anything.

    Runs the compaction's own planning step (``compaction_plan``: same
    window, chain, target and strategies as a real run) with the offline
    summariser, so no LLM is called; the real run's summary may differ in
    length when an LLM writes it. Nothing is written.
    """
    from compaction.services.plan import compaction_plan
    from compaction.services.policy import resolve_chain

    plan = compaction_plan(
        session=session,
        strategy=strategy,
        instructions=instructions,
        retain_last_turns=retain_last_turns,
    )
    before = plan.window.messages
    after = {m.seq: m for m in plan.result.window.messages}
    removed = [m for m in before if m.seq not in after]
    changed_views = [
        {
            "seq": m.seq,
            "role": m.role,
            "old_state": m.view_state,
            "new_state": after[m.seq].view_state,
            "old_tokens": m.token_count or 0,
            "new_tokens": after[m.seq].token_count or 0,
        }
        for m in before
        if m.seq in after
        and (m.view, m.view_state, m.token_count)
        != (after[m.seq].view, after[m.seq].view_state, after[m.seq].token_count)
    ]
    r = plan.result.result
    kept_seqs = sorted(after)
    policy_model = (session.policy or {}).get("compaction", {}).get("model") or session.model
    try:
        from compaction.summarizers import for_session

        real = for_session(model=policy_model, provider=session.provider).name
    except Exception:  # noqa: BLE001 - only decides the wording of a note
        real = "unknown"
    if real == "offline":
        note = (
            "Summaries are written by the offline summariser: the run will do exactly "
            "this, unless the window changes first."
        )
    else:
        note = (
            f"Summary length estimated offline; the run asks {policy_model}, whose "
            "summary may be longer or shorter."
        )
    return CompactionPreview(
        chain=list(resolve_chain(session, strategy)),
        changed=plan.result.changed and r.after_tokens < r.before_tokens,
        before_tokens=r.before_tokens,
        after_tokens=r.after_tokens,
        before_msgs=r.before_msg_count,
        after_msgs=r.after_msg_count,
        strategies_run=list(r.strategies_run),
        removed_count=len(removed),
        removed_tokens=sum(m.token_count or 0 for m in removed),
        removed_first=removed[0].seq if removed else None,
        removed_last=removed[-1].seq if removed else None,
        changed_views=changed_views[:100],
        kept_first=kept_seqs[0] if kept_seqs else None,
        kept_last=kept_seqs[-1] if kept_seqs else None,
        retention=plan.retention,
        summarizer_note=note,
    )


def live_snapshot_id(session: Session) -> int | None:
    """The newest snapshot: the one the live window comes from."""
    from compaction.models import Snapshot

    return (
        Snapshot.objects.filter(session=session)
        .order_by("-id")
        .values_list("pk", flat=True)
        .first()
    )
