"""Schemas of the model profiles API: ``GET /models`` and ``PUT /models/{provider}/{model}/prices``."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from .schemas_base import MAX_TOKENS, In
from .schemas_out import Out
from .services.prices import MAX_PRICE

_PRICE = "USD per million tokens"


class PricesIn(In):
    """All four prices (the 1-hour cache write beside them when it differs from 2 × input);
    with ``context_window`` / ``max_output_tokens``, the profile's limits too."""

    input: float = Field(..., ge=0, le=MAX_PRICE, description=f"uncached input, {_PRICE}")
    output: float = Field(..., ge=0, le=MAX_PRICE, description=f"output, {_PRICE}")
    cache_write_5m: float = Field(
        ..., ge=0, le=MAX_PRICE, description=f"cache write (5-minute TTL), {_PRICE}"
    )
    cache_read: float = Field(..., ge=0, le=MAX_PRICE, description=f"cache read, {_PRICE}")
    cache_write_1h: float | None = Field(
        None,
        ge=0,
        le=MAX_PRICE,
        description=f"cache write (1-hour TTL), {_PRICE}; null: 2 × input",
    )
    context_window: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="the profile's window; for a model added here, null: what it resolves to today",
    )
    max_output_tokens: int | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS,
        description="the profile's output cap; for a model added here, null: as resolved today",
    )


class PricesOut(Out):
    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float


class ModelOut(Out):
    """A model profile as a session on the model sees it."""

    provider: str
    model: str = Field(..., description="* is the provider's default row (any other model)")
    context_window: int = Field(..., description="what a session gets when it names none")
    max_output_tokens: int
    buffer_tokens: int
    tokenizer: str
    min_cacheable_tokens: int | None
    prices: PricesOut | None = Field(
        ..., description=f"{_PRICE}, as charged; null: no price, calls show no cost"
    )
    prices_from: str | None = Field(
        ..., description="the profile the prices come from (provider/model, or provider/*)"
    )
    prices_set_at: datetime | None = Field(
        ..., description="null: the published prices the service ships with"
    )
    prices_set_by: str | None


class ModelListOut(Out):
    items: list[ModelOut]
