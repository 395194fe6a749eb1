"""The sessions list: filters, sorting and one page of sessions across every agent key.

Operators see every session, whatever agent key owns it, so these selectors
take no owner (the API's selectors always do).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.db.models import ExpressionWrapper, F, FloatField, Q, QuerySet
from django.db.models.functions import Greatest

from sessions import status
from sessions.models import Session

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
    via: str = ""  # "api", "proxy", or "" for both
    client: str = ""  # a client label, exactly
    failed: bool = False  # only sessions with failed calls

    @property
    def active(self) -> bool:
        return bool(
            self.q
            or self.agent
            or self.status
            or self.key
            or self.via
            or self.client
            or self.failed
        )


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
        qs = qs.filter(
            Q(external_id__icontains=filters.q)
            | Q(agent__icontains=filters.q)
            | Q(first_user_text__icontains=filters.q)
        )
    if filters.agent:
        qs = qs.filter(agent=filters.agent)
    if filters.key:
        qs = qs.filter(owner_id=filters.key)
    if filters.via:
        qs = qs.filter(via=filters.via)
    if filters.client:
        qs = qs.filter(client=filters.client)
    if filters.failed:
        qs = qs.filter(failed_calls__gt=0)
    if filters.status == "final":
        qs = qs.filter(Q(guard_status="final") | Q(status=Session.Status.FINAL))
    elif filters.status in GUARD_STATUSES:
        qs = qs.filter(guard_status=filters.status).exclude(status=Session.Status.FINAL)
    qs = qs.order_by(*SORTS.get(filters.sort, SORTS["activity"]))
    paginator = Paginator(qs, per_page)
    return paginator.get_page(filters.page)


def session_agents() -> list[str]:
    """Every agent name in use, for the filter's choices: 1 query."""
    return list(
        Session.objects.exclude(agent="")
        .order_by("agent")
        .values_list("agent", flat=True)
        .distinct()
    )


def session_clients(limit: int = 50) -> list[str]:
    """The client labels in use (at most ``limit``), for the filter's choices: 1 query."""
    return list(
        Session.objects.exclude(client="")
        .order_by("client")
        .values_list("client", flat=True)
        .distinct()[:limit]
    )


def usage_pct(session: Session) -> float:
    """ "used" as a % of the usable window, from the row's cached guard figure
    (docs/dashboard.md#used): the same function as the inspector's."""
    return status.used_pct(session.used_tokens, status.usable_tokens(session))
