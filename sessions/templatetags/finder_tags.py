"""``{% finder_filters as filters %}``: the timeline finder's filter choices, from one list."""

from __future__ import annotations

from django import template

from sessions.dashboard.selectors.finder import FILTERS

register = template.Library()


@register.simple_tag
def finder_filters() -> dict[str, str]:
    return FILTERS
