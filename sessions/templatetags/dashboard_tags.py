"""Formatting filters for the dashboard templates."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from sessions.dashboard import charts

register = template.Library()


@register.filter
def tokens(value: Any) -> str:
    """12345 → '12,345' (exact: the budget tables show exact numbers)."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def short(value: Any) -> str:
    """12345 → '12.3k'."""
    try:
        return charts.short(value)
    except (TypeError, ValueError):
        return "—"


@register.filter
def signed(value: Any) -> str:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return "—"
    return f"+{number:,}" if number > 0 else f"{number:,}".replace("-", "−")


@register.filter
def ago(value: datetime | None) -> str:
    """'just now', '42 s ago', '5 min ago', '3 h ago', '2 d ago', then the date."""
    if not value:
        return "—"
    seconds = int((timezone.now() - value).total_seconds())
    if seconds < 5:
        return "just now"
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    if seconds < 7 * 86400:
        return f"{seconds // 86400} d ago"
    return value.strftime("%b %-d, %Y")


@register.filter
def percent_of(part: Any, whole: Any) -> str:
    try:
        return f"{100 * int(part) / int(whole):.1f}"
    except (TypeError, ValueError, ZeroDivisionError):
        return "0.0"


@register.filter
def kib(value: Any) -> str:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return "—"
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"


@register.filter
def subtract(a: Any, b: Any) -> int:
    try:
        return int(a) - int(b)
    except (TypeError, ValueError):
        return 0
