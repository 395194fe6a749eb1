"""Input checks the section and tool services share: how many items, unique names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextsvc.errors import ValidationFailed


def reject_duplicate_names(items: Sequence[Mapping[str, Any]], what: str) -> None:
    """422 naming the first item whose ``name`` an earlier item already has."""
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item["name"] in seen:
            raise ValidationFailed(
                f"Duplicate {what} name {item['name']!r} at index {i}",
                details={"field": f"{what}s.{i}.name"},
            )
        seen.add(item["name"])


def check_item_count(
    items: Sequence[Mapping[str, Any]], what: str, maximum: int, setting: str
) -> None:
    """422 naming the first item over ``maximum`` (the limit's setting is ``setting``)."""
    if len(items) > maximum:
        first = items[maximum]
        raise ValidationFailed(
            f"At most {maximum} {what}s per session ({setting}); got {len(items)}:"
            f" {what} {first.get('name')!r} at index {maximum} is over the limit",
            details={"field": f"{what}s.{maximum}", "max": maximum, "count": len(items)},
        )
