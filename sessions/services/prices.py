"""Writes of model prices (docs/dashboard.md#models-and-prices): set, clear, add a model.

Prices are USD per million tokens in ``ModelProfile.prices``. The Models &
prices page, the admin and ``PUT /api/v1/models/{provider}/{model}/prices``
all store through here, so each checks a table the same way. A call keeps the
prices of its build (``ContextCall.prices``): a change prices the calls built
after it, never the ones already recorded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from contextsvc.engine.budget import Limits, resolve_limits, split_model_id
from contextsvc.engine.errors import EngineValidationError
from contextsvc.errors import Conflict, ValidationFailed
from sessions import accounting
from sessions.extensions import REGISTRY
from sessions.models import ModelProfile

# Set together, or not at all: a model with half a price table would be
# priced wrong rather than not priced.
PRICE_KEYS = ("input", "output", "cache_write_5m", "cache_read")
# Optional beside them: without it a 1-hour cache write costs 2 x input
# (contextsvc.engine.caching.Prices.from_table), Anthropic's published multiplier.
OPTIONAL_PRICE_KEYS = ("cache_write_1h",)
PRICE_LABELS = {
    "input": "Input",
    "output": "Output",
    "cache_write_5m": "Cache write",
    "cache_write_1h": "Cache write (1 h)",
    "cache_read": "Cache read",
}
# USD per million tokens; far above any model's price, low enough that a
# typo of a few digits is refused rather than multiplied into every cost.
MAX_PRICE = 100_000.0
PROVIDER_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,49}"
MAX_MODEL_CHARS = 200
# The provider's default row (``model=""``) in URLs and API bodies.
DEFAULT_MODEL = "*"
LIMIT_KEYS = ("context_window", "max_output_tokens")


def _refuse(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{field}: {message}", details={"field": field})


def clean_prices(raw: Mapping[str, Any] | None) -> dict[str, float]:
    """The table to store: the four prices (and the 1-hour write when given), or ``{}``.

    Refused with the field named: an unknown key, a value that is not a finite
    number, below 0 or above ``MAX_PRICE``, or some of the four without the rest.
    """
    if not raw:
        return {}
    for key in raw:
        if key not in PRICE_KEYS and key not in OPTIONAL_PRICE_KEYS:
            known = ", ".join((*PRICE_KEYS, *OPTIONAL_PRICE_KEYS))
            raise _refuse(str(key), f"not a price (known: {known})")
    table: dict[str, float] = {}
    for key in (*PRICE_KEYS, *OPTIONAL_PRICE_KEYS):
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _refuse(key, "must be a number (USD per million tokens)")
        number = float(value)
        if not math.isfinite(number):
            raise _refuse(key, "must be a number (USD per million tokens)")
        if number < 0:
            raise _refuse(key, "must be 0 or more")
        if number > MAX_PRICE:
            raise _refuse(key, f"must be at most {MAX_PRICE:,.0f} USD per million tokens")
        table[key] = number
    if not table:
        return {}
    missing = [key for key in PRICE_KEYS if key not in table]
    if missing:
        raise _refuse(
            missing[0], "set all four prices (input, output, cache write, cache read) or none"
        )
    return table


def check_model_name(provider: str, model: str) -> tuple[str, str]:
    """``(provider, model)`` as stored: ``*`` is the provider's default row (``""``);
    a provider prefix naming the same provider is dropped (``anthropic/claude-…``)."""
    if not re.fullmatch(PROVIDER_PATTERN, provider or ""):
        raise _refuse("provider", "1-50 letters, digits, '.', '_' or '-'")
    if model == DEFAULT_MODEL:
        return provider, ""
    prefix, bare = split_model_id(model or "")
    if prefix == provider.lower():
        model = bare
    if not model or len(model) > MAX_MODEL_CHARS:
        raise _refuse("model", f"1-{MAX_MODEL_CHARS} characters, or * for the provider's default")
    if any(ch.isspace() or not ch.isprintable() for ch in model):
        raise _refuse("model", "no spaces or control characters")
    return provider, model


def clean_limits(raw: Mapping[str, Any] | None) -> dict[str, int]:
    """The given limits (context window ≥ 1, max output ≥ 0), the others left out."""
    out: dict[str, int] = {}
    for key in LIMIT_KEYS:
        value = (raw or {}).get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise _refuse(key, "must be a whole number of tokens")
        if value < (1 if key == "context_window" else 0) or value > 100_000_000:
            raise _refuse(key, "out of range")
        out[key] = value
    return out


def new_model_limits(provider: str, model: str) -> Limits:
    """The limits a session on ``model`` gets today, with no limits of its own: a
    new profile row starts with them, so adding prices changes no session's limits."""
    return accounting.resolve_session_limits(provider=provider, model=model, explicit={})


def _resolve(given: Mapping[str, Any], model: ModelProfile | None, provider: ModelProfile | None):
    try:
        return resolve_limits(
            explicit=given,
            model=model.as_limits() if model else None,
            provider=provider.as_limits() if provider else None,
        )
    except EngineValidationError as exc:
        raise _refuse(exc.field or "context_window", exc.message) from None


def _new_row(provider: str, model: str, given: Mapping[str, int]) -> ModelProfile:
    """A row for a model that has none: the limits it resolves to today (the
    given ones first, as a session's would be), and what decides for it today
    (cache minimum, mid-conversation system messages) keeps deciding."""
    model_row, provider_row = accounting.profile_rows(provider, model)
    limits = _resolve(given, model_row, provider_row)
    current = model_row or provider_row
    return ModelProfile(
        provider=provider,
        model=model,
        context_window=limits.context_window,
        max_output_tokens=limits.max_output_tokens,
        buffer_tokens=limits.buffer_tokens,
        tokenizer=limits.tokenizer,
        min_cacheable_tokens=current.min_cacheable_tokens if current else None,
        mid_system_messages=current.mid_system_messages if current else True,
    )


def _check_room(row: ModelProfile) -> None:
    """A session on the model must still have room: window − output − buffer > 0."""
    provider_row = (
        ModelProfile.objects.filter(provider=row.provider, model="").first() if row.model else None
    )
    limits = _resolve({}, row, provider_row)
    if limits.context_window - limits.max_output_tokens - limits.buffer_tokens <= 0:
        raise _refuse(
            "max_output_tokens",
            f"leaves no room for input in a {limits.context_window:,}-token window "
            f"({limits.buffer_tokens:,} buffer)",
        )


def profiles_changed() -> None:
    """Tell the apps above that a profile changed, once the change is committed."""
    for hook in REGISTRY.profiles_changed:
        transaction.on_commit(hook)


def model_prices_set(
    *,
    provider: str,
    model: str,
    prices: Mapping[str, Any] | None,
    limits: Mapping[str, Any] | None = None,
    actor: str,
    only_new: bool = False,
) -> tuple[ModelProfile, bool]:
    """Set (or with no prices, clear) a model's prices; ``(row, created)``.

    A model without a row of its own is added, with the limits it resolves to
    today unless ``limits`` gives them; a new row needs prices. Idempotent: the
    same call twice stores the same row. ``only_new``: a row already there is a
    conflict (a form that adds a model never overwrites one).
    """
    provider, model = check_model_name(provider, model)
    table = clean_prices(prices)
    given = clean_limits(limits)
    for attempt in range(2):
        try:
            with transaction.atomic():
                return _set(provider, model, table, given, actor, only_new=only_new)
        except IntegrityError:
            # The row was added by a concurrent request since the read: set its prices.
            if attempt:
                raise
    raise AssertionError("unreachable")


def _set(
    provider: str,
    model: str,
    table: dict[str, float],
    given: dict[str, int],
    actor: str,
    *,
    only_new: bool,
) -> tuple[ModelProfile, bool]:
    row = ModelProfile.objects.select_for_update().filter(provider=provider, model=model).first()
    created = row is None
    if row is not None and only_new:
        raise Conflict(
            f"model: {row.label} has a profile already; set its prices in its row",
            details={"field": "model"},
        )
    if row is None:
        if not table:
            raise _refuse("input", "a model added here needs its prices")
        row = _new_row(provider, model, given)
    else:
        for key, value in given.items():
            setattr(row, key, value)
    row.prices = table
    row.prices_set_at = timezone.now()
    row.prices_set_by = actor[:150]
    _check_room(row)
    row.save(force_insert=created)
    profiles_changed()
    return row, created


def model_profile_save(*, profile: ModelProfile, prices_changed: bool, actor: str) -> None:
    """Save a profile edited as a whole (the admin): its prices checked and stamped when
    they changed, every process's builds told."""
    if prices_changed:
        profile.prices = clean_prices(profile.prices)
        profile.prices_set_at = timezone.now()
        profile.prices_set_by = actor[:150]
    with transaction.atomic():
        profile.save()
        profiles_changed()
