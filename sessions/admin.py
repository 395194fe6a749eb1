"""The Django admin's model profiles: limits and prices per model, for staff.

The dashboard's Models & prices page edits the prices a form at a time; here
a whole row (limits, cache minimum, system-message rule) can be changed. Both
store through ``services.prices``, so a price table is checked the same way
and each process's builds read the change (docs/dashboard.md#models-and-prices).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from contextsvc.errors import ServiceError

from .models import ModelProfile
from .services.prices import clean_prices, model_profile_save, profiles_changed


class ModelProfileForm(forms.ModelForm):
    class Meta:
        model = ModelProfile
        fields = (
            "provider",
            "model",
            "context_window",
            "max_output_tokens",
            "buffer_tokens",
            "tokenizer",
            "min_cacheable_tokens",
            "mid_system_messages",
            "prices",
        )
        help_texts = {
            "model": "Empty: the provider's default row, for any model it has no row for. "
            "A dated id (claude-sonnet-4-5-20250929) uses the longest row name it starts with.",
            "prices": 'USD per million tokens: {"input": 3, "output": 15, "cache_write_5m": 3.75, '
            '"cache_read": 0.3} (all four, or {} for none); "cache_write_1h" optional (2 × input).',
        }

    def clean_prices(self) -> dict[str, Any]:
        value = self.cleaned_data.get("prices") or {}
        if "prices" not in self.changed_data:
            return value  # a published table is kept as seeded
        if not isinstance(value, dict):
            raise forms.ValidationError("An object of prices, or {} for none.")
        try:
            return clean_prices(value)
        except ServiceError as exc:
            raise forms.ValidationError(exc.message) from None


def _price(key: str, label: str) -> Any:
    @admin.display(description=label)
    def show(_admin: admin.ModelAdmin, profile: ModelProfile) -> str:
        value = (profile.prices or {}).get(key)
        return "—" if value is None else f"${value:g}"

    return show


@admin.register(ModelProfile)
class ModelProfileAdmin(admin.ModelAdmin):
    form = ModelProfileForm
    list_display = (
        "provider",
        "model_name",
        "context_window",
        "max_output_tokens",
        "input_price",
        "output_price",
        "cache_write_price",
        "cache_read_price",
        "prices_set",
    )
    list_display_links = ("provider", "model_name")
    list_filter = ("provider",)
    search_fields = ("provider", "model")
    ordering = ("provider", "model")
    readonly_fields = ("prices_set_at", "prices_set_by")

    input_price = _price("input", "input $/MTok")
    output_price = _price("output", "output $/MTok")
    cache_write_price = _price("cache_write_5m", "cache write $/MTok")
    cache_read_price = _price("cache_read", "cache read $/MTok")

    @admin.display(description="model", ordering="model")
    def model_name(self, profile: ModelProfile) -> str:
        return profile.model or "* (provider default)"

    @admin.display(description="prices set")
    def prices_set(self, profile: ModelProfile) -> str:
        if profile.prices_set_at is None:
            return "published default" if profile.prices else "no price"
        who = f" by {profile.prices_set_by}" if profile.prices_set_by else ""
        return f"{profile.prices_set_at:%Y-%m-%d %H:%M}{who}"

    def save_model(
        self, request: HttpRequest, obj: ModelProfile, form: forms.ModelForm, change: bool
    ) -> None:
        model_profile_save(
            profile=obj,
            prices_changed="prices" in form.changed_data,
            actor=request.user.get_username(),
        )

    def delete_model(self, request: HttpRequest, obj: ModelProfile) -> None:
        super().delete_model(request, obj)
        profiles_changed()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ModelProfile]) -> None:
        super().delete_queryset(request, queryset)
        profiles_changed()
