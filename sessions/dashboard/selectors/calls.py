"""The inspector's calls card and the cost figures: read from ``ContextCall`` records.

Cost is what each call cost in its model's prices: the provider-reported
usage's cost once the call is completed, else the build's estimated input
cost (marked as such). Every function runs a fixed number of queries
whatever the number of records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from django.db.models import Count, F, Q, Sum, Window
from django.db.models.functions import RowNumber, TruncDate
from django.http import Http404
from django.utils import timezone

from sessions import accounting
from sessions.models import ContextCall, Session

CALLS_PAGE = 20
TREND_CALLS = 8  # the growth per call is measured over this many recent builds
# Table fields: the breakdown JSON is read only for the one call looked at.
_LIST_FIELDS = (
    "id",
    "failed",
    "upstream_status",
    "error_type",
    "error_message",
    "stream_cut",
    "stream_events",
    "session_id",
    "source",
    "format",
    "model",
    "created_at",
    "first_seq",
    "through_seq",
    "message_count",
    "guard_status",
    "estimated_input",
    "effective_window",
    "compact_at",
    "cache_read_estimated",
    "cache_write_estimated",
    "build_ms",
    "completed_at",
    "reported_input",
    "reported_output",
    "cache_read",
    "cache_write",
    "cost_usd",
    "cost_without_cache_usd",
)


def cost_basis(reported: int, calls: int) -> str:
    """ "reported" when every call is priced from the provider's usage, else
    "estimated" (some calls still count their estimated input cost)."""
    return "reported" if reported == calls else "estimated"


@dataclass(frozen=True, slots=True)
class CostSummary:
    calls: int
    reported: int  # completed by a usage report (cost from the provider's figures)
    cost: float | None  # None: no call was priced
    without_cache: float | None
    priced: int

    @property
    def saved(self) -> float | None:
        if self.cost is None or self.without_cache is None:
            return None
        return round(self.without_cache - self.cost, 6)

    @property
    def basis(self) -> str:
        return cost_basis(self.reported, self.calls)

    @property
    def per_call(self) -> float | None:
        return self.cost / self.priced if self.cost is not None and self.priced else None


def session_cost(session: Session) -> CostSummary:
    """The session's calls and their cost: 1 query."""
    # Only priced calls: a read of the context (purpose "read") is never a cost.
    agg = ContextCall.objects.filter(session=session, purpose="call").aggregate(
        calls=Count("id"),
        reported=Count("id", filter=Q(completed_at__isnull=False)),
        priced=Count("id", filter=Q(cost_usd__isnull=False)),
        cost=Sum("cost_usd"),
        without=Sum("cost_without_cache_usd"),
    )
    return CostSummary(
        calls=agg["calls"] or 0,
        reported=agg["reported"] or 0,
        cost=agg["cost"],
        without_cache=agg["without"],
        priced=agg["priced"] or 0,
    )


@dataclass(frozen=True, slots=True)
class Forecast:
    growth: int  # tokens added per call, recent average
    used: int
    compact_at: int
    calls_left: int | None  # None: not growing

    @property
    def pct_left(self) -> float:
        return (
            round(100 * max(0, self.compact_at - self.used) / self.compact_at, 1)
            if self.compact_at
            else 0.0
        )


def growth_per_call(values: list[int]) -> int:
    """Average tokens added per call over ``values`` (newest first); 0 when shrinking."""
    if len(values) < 2:
        return 0
    return max(0, round((values[0] - values[-1]) / (len(values) - 1)))


def forecast(session: Session) -> Forecast | None:
    """Calls left before the next compaction at the recent growth per call: 1 query."""
    recent = list(
        ContextCall.objects.filter(session=session)
        .order_by("-id")
        .values_list("estimated_input", flat=True)[:TREND_CALLS]
    )
    if not recent:
        return None
    budget = accounting.compute_budget(session).budget
    growth = growth_per_call(recent)
    left = None
    if budget.used >= budget.compact_at:
        left = 0
    elif growth:
        left = math.floor((budget.compact_at - budget.used) / growth)
    return Forecast(growth=growth, used=budget.used, compact_at=budget.compact_at, calls_left=left)


def recent_calls(
    session: Session, *, before: int | None = None, limit: int = CALLS_PAGE
) -> tuple[list[ContextCall], int | None]:
    """A page of the calls table, newest first (no breakdown JSON): 1 query."""
    qs = ContextCall.objects.filter(session=session).only(*_LIST_FIELDS).order_by("-id")
    if before:
        qs = qs.filter(id__lt=before)
    rows = list(qs[: limit + 1])
    more = rows[limit - 1].id if len(rows) > limit else None
    return rows[:limit], more


def call_for_operator(session: Session, call_id: int) -> ContextCall:
    call = ContextCall.objects.filter(session=session, pk=call_id).first()
    if call is None:
        raise Http404("No such call")
    return call


def call_at_seq(session: Session, seq: int) -> ContextCall:
    """What was sent when the transcript ended at ``seq``: the newest build through it, or 404."""
    call = (
        ContextCall.objects.filter(session=session, through_seq__lte=seq)
        .order_by("-through_seq", "-id")
        .first()
    )
    if call is None:
        raise Http404("No call recorded at or before that seq")
    return call


@dataclass(frozen=True, slots=True)
class DayCost:
    day: date
    calls: int
    cost: float
    saved: float


def cost_by_day(*, days: int = 14) -> list[DayCost]:
    """Cost per day across every session, the last ``days`` days: 1 query."""
    since = timezone.now() - timedelta(days=days)
    rows = (
        ContextCall.objects.filter(created_at__gte=since, cost_usd__isnull=False, purpose="call")
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(calls=Count("id"), cost=Sum("cost_usd"), without=Sum("cost_without_cache_usd"))
        .order_by("-day")
    )
    return [
        DayCost(
            day=r["day"],
            calls=r["calls"],
            cost=round(r["cost"] or 0.0, 6),
            saved=round((r["without"] or 0.0) - (r["cost"] or 0.0), 6),
        )
        for r in rows
    ]


def list_costs(session_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Cost and trend (tokens per call, recent) of a page of sessions: 2 queries."""
    if not session_ids:
        return {}
    out: dict[int, dict[str, Any]] = {
        r["session_id"]: {
            "cost": r["cost"],
            "calls": r["calls"],
            "basis": cost_basis(r["reported"], r["calls"]),
            "trend": 0,
        }
        for r in ContextCall.objects.filter(session_id__in=session_ids, purpose="call")
        .values("session_id")
        .annotate(
            cost=Sum("cost_usd"),
            calls=Count("id"),
            reported=Count("id", filter=Q(completed_at__isnull=False)),
        )
    }
    recent: dict[int, list[int]] = {}
    rows = (
        ContextCall.objects.filter(session_id__in=session_ids)
        .annotate(rank=Window(RowNumber(), partition_by=[F("session_id")], order_by=F("id").desc()))
        .filter(rank__lte=TREND_CALLS)
        .order_by("session_id", "-id")
        .values_list("session_id", "estimated_input")
    )
    for sid, estimated in rows:
        recent.setdefault(sid, []).append(estimated)
    for sid, values in recent.items():
        out[sid]["trend"] = growth_per_call(values)
    return out


def meter_level(session: Session, status: str, pct: float) -> str:
    """The usage meter's colour: the guard's verdict, and "warn" from 10 points
    below the session's compaction threshold (86.8 % against 95 % is not "ok")."""
    if status in ("compact", "block", "final"):
        return status
    compact_pct = 100 * accounting.thresholds_of(session).compact_ratio
    return "warn" if pct >= compact_pct - 10 else "ok"
