"""The Models & prices page's forms: a model's four prices, and a model added with its limits.

Numbers ≥ 0, all four prices or none (none clears them); the service checks
the same again (``services.prices``), and its refusal lands on the field it names.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.core.validators import RegexValidator

from contextsvc.engine.caching import Prices
from contextsvc.errors import ServiceError
from sessions.schemas_base import MAX_TOKENS
from sessions.selectors_models import ModelRow, PriceTarget
from sessions.services.prices import (
    MAX_PRICE,
    OPTIONAL_PRICE_KEYS,
    PRICE_KEYS,
    PRICE_LABELS,
    PROVIDER_PATTERN,
)

ALL_PRICE_KEYS = (*PRICE_KEYS, *OPTIONAL_PRICE_KEYS)


def _price_field(key: str) -> forms.DecimalField:
    return forms.DecimalField(
        required=False, min_value=0, max_value=Decimal(MAX_PRICE), label=PRICE_LABELS[key]
    )


def plain(value: float | None) -> str:
    """A price as an input shows it: 0.0000125, not 1.25e-05."""
    if value is None:
        return ""
    text = format(Decimal(repr(float(value))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


class PricesForm(forms.Form):
    input = _price_field("input")
    output = _price_field("output")
    cache_write_5m = _price_field("cache_write_5m")
    cache_read = _price_field("cache_read")
    cache_write_1h = _price_field("cache_write_1h")

    # A model added here must come with its prices; a row's may be cleared.
    prices_required = False

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        given = [k for k in PRICE_KEYS if data.get(k) is not None]
        failed = set(self.errors)
        if not given and not failed:
            if self.prices_required:
                self.add_error("input", "A model added here needs its prices.")
            elif data.get("cache_write_1h") is not None:
                self.add_error("cache_write_1h", "Only beside the four prices.")
        elif len(given) < len(PRICE_KEYS):
            for key in PRICE_KEYS:
                if key not in given and key not in failed:
                    self.add_error(key, "Set all four prices, or none to clear them.")
        return data

    def prices(self) -> dict[str, float]:
        return {
            k: float(self.cleaned_data[k])
            for k in ALL_PRICE_KEYS
            if self.cleaned_data.get(k) is not None
        }

    def refuse(self, exc: ServiceError) -> None:
        """The service's refusal on the field it names (the form's own when not a field here)."""
        field = str((exc.details or {}).get("field", ""))
        if field in self.fields:
            # The page names the field by its label already.
            self.add_error(field, exc.message.removeprefix(f"{field}: "))
        else:
            self.add_error(None, exc.message)

    def error_lines(self) -> list[str]:
        """Each error with its field's label first ("Input: Enter a number.")."""
        lines = []
        for name, errors in self.errors.items():
            label = self.fields[name].label if name in self.fields else ""
            lines += [f"{label}: {e}" if label else str(e) for e in errors]
        return lines

    @classmethod
    def for_row(cls, row: ModelRow) -> PricesForm:
        """The row's own prices as charged (blank when it has none: then its provider's
        apply, if any); the 1-hour write only when the row sets one."""
        own = row.profile.prices or {}
        table = Prices.from_table(own)
        if table is None:
            return cls()
        initial = {k: plain(getattr(table, k)) for k in PRICE_KEYS}
        if own.get("cache_write_1h") is not None:
            initial["cache_write_1h"] = plain(own["cache_write_1h"])
        return cls(initial=initial)


class NewModelForm(PricesForm):
    provider = forms.CharField(
        max_length=50,
        validators=[RegexValidator(f"^{PROVIDER_PATTERN}$", "Letters, digits, '.', '_' or '-'.")],
    )
    model = forms.CharField(max_length=200, label="Model")
    context_window = forms.IntegerField(min_value=1, max_value=MAX_TOKENS, label="Window")
    max_output_tokens = forms.IntegerField(min_value=0, max_value=MAX_TOKENS, label="Max output")

    prices_required = True
    field_order = ("provider", "model", "context_window", "max_output_tokens", *ALL_PRICE_KEYS)
    # Not prices: shown without "$/MTok".
    limit_fields = ("provider", "model", "context_window", "max_output_tokens")

    @classmethod
    def for_target(cls, target: PriceTarget | None) -> NewModelForm:
        """Prefilled for a model with no profile: its name, and the limits it resolves to today."""
        if target is None or target.limits is None:
            return cls()
        return cls(
            initial={
                "provider": target.provider,
                "model": target.model,
                "context_window": target.limits.context_window,
                "max_output_tokens": target.limits.max_output_tokens,
            }
        )

    def limits(self) -> dict[str, int]:
        return {
            "context_window": self.cleaned_data["context_window"],
            "max_output_tokens": self.cleaned_data["max_output_tokens"],
        }
