"""The session inspector's header and budget card: one session, its messages, its budget.

Every function here runs a fixed number of queries whatever the session's
size: the budget comes from the session row's cached counters.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Sum
from django.http import Http404

from sessions import accounting, status
from sessions.live import live_q
from sessions.models import Message, Session, UsageReport


def display_status(session: Session) -> str:
    """The badge, from the same "used" figure as the meter (docs/dashboard.md#used)."""
    return status.badge_status(session)


def session_for_operator(pk: int) -> Session:
    """Any session by primary key (operators see every key's sessions), or 404."""
    session = Session.objects.select_related("owner").filter(pk=pk).first()
    if session is None:
        raise Http404("No such session")
    return session


def message_for_operator(session: Session, seq: int) -> Message:
    """One stored message of the session, or 404."""
    msg = Message.objects.filter(session=session, seq=seq).first()
    if msg is None:
        raise Http404("No such message")
    return msg


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
    def guard_projected(self) -> int:
        """The guard's projection: "used" itself (docs/dashboard.md#used)."""
        return self.used

    @property
    def projected_pct(self) -> float | None:
        """Where "used" (the guard's figure: provider-calibrated, with reserved
        tool tokens) sits on the bar, when it differs from the segments' estimate."""
        if self.estimated == self.used:
            return None
        return min(100.0, _pct(self.used, self.bar_total))


def _pct(part: int, whole: int) -> float:
    return round(100 * part / whole, 2) if whole else 0.0


def budget_view(session: Session) -> BudgetView:
    """The stacked bar and its table: 2 queries (tool-output sum, last usage report)."""
    state = accounting.compute_budget(session)
    budget = state.budget
    tool_agg = Message.objects.filter(
        live_q(session),
        session=session,
        role=Message.Role.TOOL,
        retracted_at__isnull=True,
    ).aggregate(tokens=Sum("token_count"), n=Count("seq"))  # seq: in the covering index
    tool_out = min(int(tool_agg["tokens"] or 0), budget.conversation)
    last_report = UsageReport.objects.filter(session=session).order_by("-id").first()

    limits = budget.limits
    effective = budget.effective_window
    # docs/dashboard.md#used: "used" is the guard's figure, the one the list,
    # the badge and the guard read; the segments are our component estimate.
    used = state.guard.projected
    free = max(0, effective - budget.used)  # the segments fill the bar
    bar_total = max(
        limits.context_window,
        max(used, budget.used) + limits.buffer_tokens + limits.max_output_tokens,
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
        used=used,
        remaining=effective - used,
        used_pct=status.used_pct(used, effective),
        compact_at=budget.compact_at,
        block_at=budget.block_at,
        compact_pct=_pct(budget.compact_at, bar_total),
        block_pct=_pct(budget.block_at, bar_total),
        effective_pct=_pct(effective, bar_total),
        compact_ratio=budget.thresholds.compact_ratio,
        block_ratio=budget.thresholds.block_ratio,
        status=status.badge_status(session, used, state.guard.status),
        guard_limit=state.guard.limit,
        estimated=state.estimated,
        calibrated=state.calibrated,
        reserved_tool_tokens=state.reserved,
        last_report=last_report,
        tool_output_messages=int(tool_agg["n"] or 0),
    )
