"""Completing a context build's record (``ContextCall``) with the provider's usage."""

from __future__ import annotations

from django.utils import timezone

from contextsvc.engine import caching
from sessions.models import ContextCall, Session

from .inputs import UsageData


def call_cost(prices: dict | None, usage: UsageData) -> tuple[float | None, float | None]:
    """(cost, cost without any caching) of a reported call in the profile's prices."""
    table = caching.Prices.from_table(prices)
    if table is None:
        return None, None
    ttl = str((prices or {}).get("ttl") or "5m")
    uncached = usage.get("input_tokens", 0)
    read = usage.get("cache_read_tokens", 0)
    write = usage.get("cache_creation_tokens", 0)
    output = usage.get("output_tokens", 0)
    cost = caching.cost_usd(
        table,
        input_tokens=uncached,
        cache_write_tokens=write,
        cache_read_tokens=read,
        output_tokens=output,
        ttl=ttl,
    )
    without = caching.cost_usd(
        table, input_tokens=uncached + read + write, output_tokens=output, ttl=ttl
    )
    return cost, without


def context_call_complete(*, session: Session, usage: UsageData, through_seq: int) -> int:
    """Complete the newest open record built at or before ``through_seq``
    (the call this usage reports); returns how many rows changed (0 or 1).

    A report with no open record (usage posted without a context build) changes nothing.
    """
    call = (
        ContextCall.objects.filter(
            session=session, completed_at__isnull=True, through_seq__lte=through_seq
        )
        .order_by("-id")
        .only("id", "prices")
        .first()
    )
    if call is None:
        return 0
    cost, without = call_cost(call.prices, usage)
    return ContextCall.objects.filter(pk=call.pk, completed_at__isnull=True).update(
        completed_at=timezone.now(),
        reported_input=usage.get("input_tokens", 0),
        reported_output=usage.get("output_tokens", 0),
        cache_read=usage.get("cache_read_tokens", 0),
        cache_write=usage.get("cache_creation_tokens", 0),
        cost_usd=cost,
        cost_without_cache_usd=without,
    )
