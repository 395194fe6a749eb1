"""Prices on the dashboard: a price per million tokens, and the link that sets a missing one.

``{% price_link provider model as url %}`` is the Models & prices page opened
at ``model`` (docs/dashboard.md#models-and-prices), computed without a query,
so a table of unpriced calls costs nothing more to render.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from sessions.dashboard.prices_form import plain
from sessions.selectors_models import price_url

register = template.Library()


@register.simple_tag
def price_link(provider: str, model: str) -> str:
    """The page that sets ``model``'s price, at its form; "" when no profile can apply."""
    return price_url(reverse("dashboard:model_prices"), provider or "", model or "")


@register.filter
def mtok(value: Any) -> str:
    """3 → '$3', 0.3 → '$0.3' (USD per million tokens, as published); None → ''."""
    if value is None or value == "":
        return ""
    try:
        return "$" + plain(float(value))
    except (TypeError, ValueError):
        return ""


@register.filter
def mtok_of(prices: Any, key: str) -> str:
    """One price of a ``Prices`` (or a price table) as a plain number, for a placeholder."""
    if prices is None:
        return ""
    value = prices.get(key) if isinstance(prices, dict) else getattr(prices, key, None)
    return plain(value) if isinstance(value, int | float) else ""
