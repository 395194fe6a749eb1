"""Completing a context build's record (``ContextCall``) with the provider's usage."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.utils import timezone

from contextsvc.engine import caching
from sessions.models import ContextCall, Session

from .inputs import UsageData


@cache
def _insert_plan(vendor: str, returning: bool) -> tuple[str, tuple[Any, ...]]:
    """The INSERT of one record, compiled once per database vendor."""
    fields = tuple(f for f in ContextCall._meta.concrete_fields if not f.primary_key)
    qn = connections[DEFAULT_DB_ALIAS].ops.quote_name
    columns = ", ".join(qn(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {qn(ContextCall._meta.db_table)} ({columns}) VALUES ({marks})"
    if returning:
        sql += f" RETURNING {qn(ContextCall._meta.pk.column)}"
    return sql, fields


def context_call_insert(values: dict[str, Any]) -> int | None:
    """Insert one ``ContextCall`` (``values`` by attname; defaults for the rest); its id.

    ``objects.create`` would build a model and compile the INSERT on every
    context GET; the record is written once per build, so the statement is
    compiled once and the row sent as is. The id comes back in the same
    statement (``RETURNING``; None on a database without it): the proxy's log
    lines name the record of the call.
    """
    conn = connections[DEFAULT_DB_ALIAS]
    returning = conn.features.can_return_columns_from_insert
    sql, fields = _insert_plan(conn.vendor, returning)
    params = [
        f.get_db_prep_save(values[f.attname] if f.attname in values else f.get_default(), conn)
        for f in fields
    ]
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0] if returning else None


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
