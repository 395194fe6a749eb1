"""The session's prompt-cache policy, its model's cache profile, and the deferral inputs."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any

from contextsvc.engine import deferral, prompt
from contextsvc.engine.budget import split_model_id
from contextsvc.engine.tokens import Tokenizer
from contextsvc.lru import BoundedLRU
from sessions import accounting
from sessions.models import ModelProfile, Session


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """``policy.prompt_cache`` with its defaults (sessions.schemas.PromptCachePolicy)."""

    enabled: bool = True
    ttl: str = "5m"
    history_breakpoint: bool = True
    mark_tools: bool = True
    max_breakpoints: int = prompt.MAX_BREAKPOINTS
    min_cacheable_tokens: int | None = None
    cacheable_first: bool = True


_CACHE_POLICY_FIELDS = {f.name for f in fields(CachePolicy)}


def cache_policy(session: Session) -> CachePolicy:
    raw = (session.policy or {}).get("prompt_cache") or {}
    known = {k: v for k, v in raw.items() if k in _CACHE_POLICY_FIELDS and v is not None}
    return CachePolicy(**known)


def deferral_threshold(session: Session) -> float:
    value = (session.policy or {}).get("tool_deferral_threshold")
    return deferral.DEFAULT_DEFERRAL_THRESHOLD if value is None else value


def deferral_note_style(session: Session) -> str:
    """``policy.tool_deferral_note``: ``list`` (default) or ``count`` (the one-line note
    (docs/concepts/deferral.md#deferral-note))."""
    value = (session.policy or {}).get("tool_deferral_note")
    return deferral.DEFAULT_NOTE_STYLE if value is None else value


# A deferral limit no tool list reaches: nothing is deferred.
NO_DEFERRAL_LIMIT = 2**62


def client_tool_search(session: Session) -> bool:
    """The client defers its own tools (``policy.proxy.client_tool_search``, set by the proxy)."""
    return bool(((session.policy or {}).get("proxy") or {}).get("client_tool_search"))


def deferral_inputs(session: Session) -> tuple[Tokenizer, float, int, float]:
    """The tokenizer, schema scale, token limit and threshold tool deferral works with.

    A client that runs its own tool search (Claude Code's ``ToolSearch`` and
    ``defer_loading`` tools) gets no deferral from us: deferring its tools
    again would hide the search tool or the tools it loads.
    """
    tokenizer = accounting.tokenizer_of(session)
    scale = accounting.estimate_config_of(session).tool_schema_scale
    threshold = deferral_threshold(session)
    limit = deferral.deferral_limit(accounting.limits_of(session).effective_window, threshold)
    if client_tool_search(session):
        limit = NO_DEFERRAL_LIMIT
    return tokenizer, scale, limit, threshold


@dataclass(frozen=True, slots=True)
class CacheProfile:
    """What a build needs of the model's profile (cache figures, prices, message rules)."""

    min_cacheable: int
    prices: dict[str, Any]
    # The model takes a ``system`` message inside ``messages`` (ModelProfile).
    mid_system_messages: bool = True
    # Where ``prices`` come from, kept on each call's record: the profile row
    # and who set its prices when (None: no prices).
    price_source: dict[str, Any] | None = None


# Profiles change when an operator edits them (the Models & prices page, the
# admin, the API): the process that saved the change forgets its profiles at
# once (``forget_profiles``); any other process may use a figure up to this old
# instead of querying them on every request.
PROFILE_TTL_SECONDS = 30.0
# (provider, model) → (loaded at, profile).
_PROFILES: BoundedLRU[tuple[str, str], tuple[float, CacheProfile]] = BoundedLRU(1000)


def cache_profile(session: Session) -> CacheProfile:
    """The model's minimum cacheable prefix and price table.

    Resolved like ``accounting.profile_limits``: the longest profile model name
    the session's model starts with ("claude-sonnet-4-5-20250929" → its family
    row), then the provider's row, then 1,024 tokens and no prices.
    """
    provider = session.provider or accounting.infer_provider(session.model)
    key = (provider, session.model)
    now = time.monotonic()
    cached = _PROFILES.get(key)
    if cached is not None and now - cached[0] < PROFILE_TTL_SECONDS:
        return cached[1]
    profile = _load_profile(provider, session.model)
    _PROFILES.put(key, (now, profile))
    return profile


def forget_profiles() -> None:
    """Drop this process's profiles: the next build reads them again (a profile changed)."""
    _PROFILES.clear()


def _load_profile(provider: str, model: str) -> CacheProfile:
    model = split_model_id(model)[1]
    rows = list(
        ModelProfile.objects.filter(provider=provider).only(
            "provider",
            "model",
            "min_cacheable_tokens",
            "prices",
            "mid_system_messages",
            "prices_set_at",
            "prices_set_by",
        )
    )
    provider_row = next((p for p in rows if p.model == ""), None)
    candidates = [p for p in rows if p.model and model.startswith(p.model)]
    model_row = max(candidates, key=lambda p: len(p.model), default=None)
    minimum = next(
        (
            row.min_cacheable_tokens
            for row in (model_row, provider_row)
            if row is not None and row.min_cacheable_tokens
        ),
        prompt.DEFAULT_MIN_CACHEABLE_TOKENS,
    )
    priced = next(
        (row for row in (model_row, provider_row) if row is not None and row.prices), None
    )
    source = None
    if priced is not None:
        set_at = priced.prices_set_at.isoformat() if priced.prices_set_at else None
        source = {"profile": priced.label, "set_at": set_at, "set_by": priced.prices_set_by}
    # The most specific row decides; no row at all: an unknown model, assumed
    # to accept them like the newest models do.
    row = model_row or provider_row
    mid_system = True if row is None else row.mid_system_messages
    return CacheProfile(
        min_cacheable=minimum,
        prices=dict(priced.prices) if priced is not None else {},
        mid_system_messages=mid_system,
        price_source=source,
    )
