"""The budget's prompting blocks: ``cache`` (estimated and reported side by side),
``deferral``, and ``degraded``, for a build and for GET budget."""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import Count, Sum

from contextsvc.engine import caching
from sessions.models import Session, UsageReport

from ..models import PromptState
from .policy import CachePolicy, CacheProfile, cache_policy, cache_profile
from .selection import ToolPlan
from .state import degraded_entry

log = logging.getLogger("contextsvc.prompting")


def deferral_block(state: PromptState | None, tool_plan: ToolPlan | None = None) -> dict[str, Any]:
    """The budget's ``deferral`` block: live from a build, else the last build's."""
    if tool_plan is not None and tool_plan.selection is not None:
        sel = tool_plan.selection
        base: dict[str, Any] = {
            "active": bool(sel.deferred or sel.loaded),
            "threshold_ratio": tool_plan.threshold,
            "limit_tokens": tool_plan.limit,
            "registered_tools": len(tool_plan.registered),
            "sent_tools": len(sel.active),
            "deferred_count": len(sel.deferred),
            "deferred": list(sel.deferred),
            "loaded": list(sel.loaded),
            "tokens_all": sel.tokens_all,
            "tokens_sent": sel.tokens_sent,
            "tokens_saved": sel.tokens_saved,
        }
    elif tool_plan is not None:
        base = {
            "active": False,
            "registered_tools": len(tool_plan.registered),
            "sent_tools": len(tool_plan.tools),
            "deferred_count": 0,
            "deferred": [],
            "loaded": [],
            "tokens_saved": 0,
        }
    else:
        base = (
            dict(state.last_deferral)
            if state is not None and state.last_deferral
            else {
                "active": False,
                "deferred_count": 0,
                "deferred": [],
                "loaded": [],
                "tokens_saved": 0,
            }
        )
    if state is not None:
        base["tokens_saved_total"] = state.tokens_saved_total
        base["search_count"] = state.search_count
        base["searched"] = state.searched or {}
        base["loaded_total"] = state.loaded_total or {}
        base["recent_searches"] = state.recent_searches or []
    return base


def _reported(session: Session, prices: caching.Prices | None, ttl: str) -> dict[str, Any]:
    latest = UsageReport.objects.filter(session=session).order_by("-id").first()
    totals = UsageReport.objects.filter(session=session).aggregate(
        calls=Count("id"),
        input_tokens=Sum("input_tokens"),
        cache_creation_input_tokens=Sum("cache_creation_tokens"),
        cache_read_input_tokens=Sum("cache_read_tokens"),
        output_tokens=Sum("output_tokens"),
    )
    totals = {k: int(v or 0) for k, v in totals.items()}
    totals_input = (
        totals["input_tokens"]
        + totals["cache_creation_input_tokens"]
        + totals["cache_read_input_tokens"]
    )
    totals["cache_read_ratio"] = (
        round(totals["cache_read_input_tokens"] / totals_input, 4) if totals_input else 0.0
    )
    if prices is not None:
        totals["cost_usd"] = caching.cost_usd(
            prices,
            input_tokens=totals["input_tokens"],
            cache_write_tokens=totals["cache_creation_input_tokens"],
            cache_read_tokens=totals["cache_read_input_tokens"],
            output_tokens=totals["output_tokens"],
            ttl=ttl,
        )
    last = None
    if latest is not None:
        last = {
            "through_seq": latest.through_seq,
            "input_tokens": latest.input_tokens,
            "cache_creation_input_tokens": latest.cache_creation_tokens,
            "cache_read_input_tokens": latest.cache_read_tokens,
            "output_tokens": latest.output_tokens,
            "at": latest.created_at.isoformat(),
        }
        sent = latest.input_tokens + latest.cache_creation_tokens + latest.cache_read_tokens
        last["cache_read_ratio"] = round(latest.cache_read_tokens / sent, 4) if sent else 0.0
        if prices is not None:
            last["cost_usd"] = caching.cost_usd(
                prices,
                input_tokens=latest.input_tokens,
                cache_write_tokens=latest.cache_creation_tokens,
                cache_read_tokens=latest.cache_read_tokens,
                output_tokens=latest.output_tokens,
                ttl=ttl,
            )
    return {"last": last, "totals": totals}


def cache_block(
    session: Session,
    state: PromptState | None,
    record: dict[str, Any] | None = None,
    *,
    policy: CachePolicy | None = None,
    profile: CacheProfile | None = None,
    with_reported: bool = True,
) -> dict[str, Any]:
    """Estimated (from our builds) and reported (from POST usage) side by side.

    The context response leaves the reported side out (``with_reported``):
    it costs two queries on the hot path, and GET budget shows it.
    """
    policy = policy or cache_policy(session)
    profile = profile or cache_profile(session)
    prices = caching.Prices.from_table(profile.prices)
    if record is None and state is not None and state.last_build:
        record = state.last_build
    reported = (
        _reported(session, prices, policy.ttl) if with_reported else {"last": None, "totals": None}
    )
    last = reported["last"]
    side_by_side = None
    if record is not None and with_reported:
        side_by_side = {
            "cache_read_tokens": {
                "estimated": record.get("cache_read_tokens"),
                "reported": last["cache_read_input_tokens"] if last else None,
            },
            "cache_write_tokens": {
                "estimated": record.get("cache_write_tokens"),
                "reported": last["cache_creation_input_tokens"] if last else None,
            },
            "uncached_input_tokens": {
                "estimated": record.get("uncached_input_tokens"),
                "reported": last["input_tokens"] if last else None,
            },
            "input_cost_usd": {
                "estimated": record.get("input_cost_usd"),
                "reported": (
                    caching.cost_usd(
                        prices,
                        input_tokens=last["input_tokens"],
                        cache_write_tokens=last["cache_creation_input_tokens"],
                        cache_read_tokens=last["cache_read_input_tokens"],
                        ttl=policy.ttl,
                    )
                    if last and prices is not None
                    else None
                ),
            },
        }
    return {
        "enabled": policy.enabled,
        "ttl": policy.ttl,
        "min_cacheable_tokens": policy.min_cacheable_tokens or profile.min_cacheable,
        "prices": prices.to_dict() if prices is not None else None,
        "last_build": record,
        "reported": last,
        "side_by_side": side_by_side,
        "totals": {
            "estimated": (state.cache_totals if state is not None else {}) or {},
            "reported": reported["totals"],
        },
    }


def budget_blocks(session: Session) -> dict[str, Any]:
    """``REGISTRY.budget_blocks``: ``cache``, ``deferral`` and ``degraded`` for
    GET budget, from the last build (no build)."""
    try:
        state = PromptState.objects.filter(session_id=session.pk).first()
        return {
            "cache": cache_block(session, state),
            "deferral": deferral_block(state),
            "degraded": (state.degraded if state is not None else []) or [],
        }
    except Exception as exc:
        log.exception("prompt state unreadable for session %s", session.external_id)
        return {"cache": None, "deferral": None, "degraded": [degraded_entry("accounting", exc)]}
