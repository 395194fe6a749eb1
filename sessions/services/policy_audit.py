"""The audit line of a policy change: which leaves changed, from what to what."""

from __future__ import annotations

from typing import Any

from sessions.models import PolicyChange, Session


def _leaves(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    # Lists are leaves: a chain or a directive list changes as a whole.
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _leaves(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif prefix:
        out[prefix] = value
    return out


def policy_diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Leaf-by-leaf changes between two stored policies, in a stable order.

    ``old`` / ``new`` is None where a leaf is absent (the default applies).
    """
    before = _leaves(old or {}, "", {})
    after = _leaves(new or {}, "", {})
    return [
        {"field": key, "old": before.get(key), "new": after.get(key)}
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key)
    ]


def policy_change_record(
    *, session: Session, old: dict[str, Any] | None, actor: str
) -> PolicyChange | None:
    """Write the audit line of a change (inside the caller's transaction), if anything changed."""
    changes = policy_diff(old, session.policy)
    if not changes:
        return None
    return PolicyChange.objects.create(
        session=session, actor=actor[:200], after_seq=session.last_seq, changes=changes
    )
