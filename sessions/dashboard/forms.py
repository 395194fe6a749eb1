"""Input parsing for the session pages: list filters, the new-key form, integer query parameters."""

from __future__ import annotations

from django import forms

from sessions.dashboard.selectors.listing import GUARD_STATUSES, SORTS, SessionFilters

SORT_CHOICES = [
    ("activity", "Last activity"),
    ("usage", "Usage"),
    ("messages", "Messages"),
    ("created", "Newest"),
    ("id", "Session id"),
]
assert {k for k, _ in SORT_CHOICES} == set(SORTS)


class SessionFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=128, strip=True)
    agent = forms.CharField(required=False, max_length=100)
    status = forms.ChoiceField(
        required=False, choices=[("", "Any status"), *[(s, s) for s in GUARD_STATUSES]]
    )
    sort = forms.ChoiceField(required=False, choices=SORT_CHOICES)
    page = forms.IntegerField(required=False, min_value=1)
    key = forms.IntegerField(required=False, min_value=1)
    via = forms.ChoiceField(
        required=False, choices=[("", "API and proxy"), ("api", "API"), ("proxy", "Proxy")]
    )
    client = forms.CharField(required=False, max_length=64)
    failed = forms.BooleanField(required=False)

    def filters(self) -> SessionFilters:
        """Valid fields are used; an invalid one falls back to its default."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return SessionFilters(
            q=data.get("q") or "",
            agent=data.get("agent") or "",
            status=data.get("status") or "",
            sort=data.get("sort") or "activity",
            page=data.get("page") or 1,
            key=data.get("key"),
            via=data.get("via") or "",
            client=data.get("client") or "",
            failed=bool(data.get("failed")),
        )


class AgentKeyForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True, label="Key name")


def int_param(value: str | None, *, default: int | None = None, minimum: int = 0) -> int | None:
    """A non-negative integer query parameter; anything else is the default."""
    try:
        number = int(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default
    if number is None or number < minimum:
        return default
    return number
