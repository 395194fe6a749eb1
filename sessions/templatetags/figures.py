"""One vocabulary of figures for every dashboard page, and money formatting.

``{% figure "used" %}`` renders the figure's name with its one-line
definition as a tooltip; ``{% why "used" "provider-reported" %}`` the
one-line reason two figures shown together differ.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html

register = template.Library()

FIGURES: dict[str, str] = {
    "used": (
        "The session's figure the guard decides on, the same in the list, the inspector "
        "and the badge: the provider's last count plus our estimate of what changed since "
        "(our estimate alone before any report), plus tokens reserved for pending tool results."
    ),
    "estimated": (
        "Our estimate of what a build sends: system, skills, tool schemas (×2.09), summary "
        "and the live messages."
    ),
    "usable": "The effective window: context window − buffer − reserved output (the guard's limit).",
    "projected": ("The guard's projection: used, plus any extra tokens the caller asked room for."),
    "provider-reported": (
        "What the provider counted for a call: input + cache reads + cache writes, as it reported."
    ),
    "history-only": (
        "The messages alone (no system prompt or tool schemas): what a compaction can shrink."
    ),
    "as sent": "The tokens of each block as the request carried them (tool schemas unscaled).",
}

WHY: dict[frozenset[str], str] = {
    frozenset({"used", "provider-reported"}): (
        "Why these differ: used is the provider's last count plus our estimate of what "
        "changed since; provider-reported is the provider's own count at that call."
    ),
    frozenset({"used", "projected"}): (
        "Why these differ: used starts from the provider-calibrated figure when there is "
        "one and adds tokens reserved for pending tool results; the bar's segments are "
        "our component estimate."
    ),
    frozenset({"estimated", "provider-reported"}): (
        "Why these differ: estimated is ours (tool schemas scaled ×2.09, chars/4 floor); "
        "provider-reported is the provider's own tokenizer, counted after the call."
    ),
    frozenset({"estimated", "as sent"}): (
        "Why these differ: estimated counts tool schemas ×2.09 (a safety factor); "
        "as sent counts them as the provider's prefix holds them."
    ),
    frozenset({"used", "history-only"}): (
        "Why these differ: history-only leaves out the system prompt, skills and tool "
        "schemas, which a compaction does not touch."
    ),
    frozenset({"used", "as sent"}): (
        "Why these differ: used counts tool schemas ×2.09 (a safety factor); "
        "as sent counts them as the provider's prefix holds them."
    ),
    frozenset({"used", "usable"}): (
        "used is what is in the window; usable is how much may be: the window less the "
        "buffer and the reserved output."
    ),
}


@register.simple_tag
def figure(name: str, label: str = "") -> str:
    return format_html(
        '<abbr class="figure" data-figure="{}" title="{}">{}</abbr>',
        name,
        FIGURES.get(name, ""),
        label or name,
    )


@register.simple_tag
def why(a: str, b: str) -> str:
    text = WHY.get(frozenset({a, b}))
    if not text:
        return ""
    return format_html('<p class="note small why-differ">{}</p>', text)


@register.filter
def usd(value: Any) -> str:
    """0.01234 → '$0.0123'; a cent or more → '$1.23'; None → '—'."""
    if value is None or value == "":
        return "—"
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return "—"
    sign = "−" if amount < 0 else ""
    amount = abs(amount)
    if amount >= 1:
        return f"{sign}${amount:,.2f}"
    if amount == 0:
        return "$0"
    return f"{sign}${amount:.4f}"


@register.filter
def label(key: Any) -> str:
    """A component key as words: ``system_prompt`` → ``system prompt``."""
    return str(key).replace("_", " ")
