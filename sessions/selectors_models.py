"""Reads of the model profiles: limits and prices per model, for the API and the dashboard.

Profiles are not any agent key's: every key reads the same table, and only
operators write it (``services.prices``; docs/dashboard.md#models-and-prices).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import Http404

from contextsvc.engine.budget import Limits, resolve_limits, split_model_id
from contextsvc.engine.caching import Prices

from . import accounting
from .models import ModelProfile
from .services.prices import DEFAULT_MODEL, new_model_limits


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One profile as a session on its model sees it."""

    profile: ModelProfile
    # What a session on the model gets when it names no limits of its own.
    limits: Limits
    # The prices its calls are charged (cache writes and reads derived from the
    # input price where the row leaves them out); None: no price.
    prices: Prices | None
    # The row those prices come from: itself, or its provider's default row.
    priced_by: ModelProfile | None

    @property
    def anchor(self) -> str:
        return model_anchor(self.profile.provider, self.profile.model)

    @property
    def inherited(self) -> bool:
        return self.priced_by is not None and self.priced_by.pk != self.profile.pk


@dataclass(frozen=True, slots=True)
class PriceTarget:
    """Where a price for ``provider``/``model`` is set: the profile that prices it
    today (a family row the name starts with), or a new row with ``limits``."""

    provider: str
    model: str
    row: ModelProfile | None
    limits: Limits | None  # for a new row only

    @property
    def anchor(self) -> str:
        return model_anchor(self.provider, self.model)


def model_anchor(provider: str, model: str) -> str:
    """An HTML id for a model, the same for the link and the page: letters, digits
    and '-' kept, anything else written as ``_<hex>_`` (so no two names meet)."""
    name = f"{provider}/{model or DEFAULT_MODEL}"
    return "model-" + "".join(
        ch if ch.isascii() and (ch.isalnum() or ch == "-") else f"_{ord(ch):x}_" for ch in name
    )


def price_url(base: str, provider: str, model: str) -> str:
    """The Models & prices page (at ``base``) opened at ``model``'s form, or ""
    when no profile can apply (a session with no provider)."""
    provider = provider or accounting.infer_provider(model)
    bare = split_model_id(model)[1]
    if not provider or not bare:
        return ""
    query = urlencode({"provider": provider, "model": bare})
    return f"{base}?{query}#{model_anchor(provider, bare)}"


def _row(profile: ModelProfile, provider_row: ModelProfile | None) -> ModelRow:
    """``profile`` as a session sees it; ``provider_row``: its provider's default row."""
    provider_row = provider_row if profile.model else None
    if profile.model:
        provider = provider_row.as_limits() if provider_row else None
        limits = resolve_limits(explicit={}, model=profile.as_limits(), provider=provider)
    else:
        limits = resolve_limits(explicit={}, provider=profile.as_limits())
    # The prices a build uses: the row's own, else its provider's (prompting's cache_profile).
    priced_by = next((p for p in (profile, provider_row) if p is not None and p.prices), None)
    return ModelRow(
        profile=profile,
        limits=limits,
        prices=Prices.from_table(priced_by.prices) if priced_by else None,
        priced_by=priced_by,
    )


def model_rows() -> list[ModelRow]:
    """Every profile, by provider (its default row first) then model: 1 query."""
    profiles = list(ModelProfile.objects.order_by("provider", "model"))
    defaults = {p.provider: p for p in profiles if not p.model}
    return [_row(p, defaults.get(p.provider)) for p in profiles]


def model_row_of(profile: ModelProfile) -> ModelRow:
    """One profile as ``model_rows`` gives it (its provider's default row read when needed)."""
    provider_row = (
        ModelProfile.objects.filter(provider=profile.provider, model="").first()
        if profile.model
        else None
    )
    return _row(profile, provider_row)


def price_target(provider: str, model: str) -> PriceTarget | None:
    """Where to set ``model``'s price (None: no provider, so no profile applies).

    A dated id ("claude-sonnet-4-5-20250929") is priced by its family row
    (``accounting.profile_rows``), so that row takes the price; a name no row
    matches gets a new row with the limits it resolves to today.
    """
    provider = provider or accounting.infer_provider(model)
    bare = split_model_id(model)[1]
    if not provider or not bare:
        return None
    model_row, _ = accounting.profile_rows(provider, bare)
    if model_row is not None:
        return PriceTarget(provider, bare, model_row, None)
    return PriceTarget(provider, bare, None, new_model_limits(provider, bare))


def model_profile_for_operator(pk: int) -> ModelProfile:
    profile = ModelProfile.objects.filter(pk=pk).first()
    if profile is None:
        raise Http404("No such model profile")
    return profile


def model_to_dict(row: ModelRow) -> dict[str, Any]:
    """The API's view of one profile (``GET /api/v1/models``)."""
    profile = row.profile
    return {
        "provider": profile.provider,
        "model": profile.model or DEFAULT_MODEL,
        "context_window": row.limits.context_window,
        "max_output_tokens": row.limits.max_output_tokens,
        "buffer_tokens": row.limits.buffer_tokens,
        "tokenizer": row.limits.tokenizer,
        "min_cacheable_tokens": profile.min_cacheable_tokens,
        "prices": row.prices.to_dict() if row.prices else None,
        "prices_from": row.priced_by.label if row.priced_by else None,
        "prices_set_at": row.priced_by.prices_set_at if row.priced_by else None,
        "prices_set_by": (row.priced_by.prices_set_by or None) if row.priced_by else None,
    }
