"""Where the summary travels in a built context: a user message or the system role.

spec 000 §2.7 sends the summary as a user message after the retain (DESIGN.md's
chain); spec 003 injects it into the system prompt and spec 004 sends it as a
system message ``[Earlier conversation summary: …]``. ``engine.build`` places
it; this module names the roles and resolves the policy's choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# spec 004: a system-role summary reads "[Earlier conversation summary: …]".
SYSTEM_SUMMARY_FORMAT = "[Earlier conversation summary: {summary}]"
SUMMARY_ROLES: tuple[str, ...] = ("user", "system")


def resolve_summary_role(compaction_policy: Mapping[str, Any] | None) -> str:
    """``policy.compaction.summary_role``: ``user``, ``system`` or ``auto``.

    ``auto`` (the default) is ``system`` when the session compacts with spec
    004's sandwich (its summary is a system message) and ``user`` otherwise.
    """
    policy = compaction_policy or {}
    role = policy.get("summary_role") or "auto"
    if role in SUMMARY_ROLES:
        return str(role)
    chain = list(policy.get("chain") or ())
    return "system" if policy.get("strategy") == "sandwich" or chain == ["sandwich"] else "user"


def system_summary_text(role: str, summary: str) -> str:
    """The summary as system text when it travels in the system role, else ""."""
    if role != "system" or not summary:
        return ""
    return SYSTEM_SUMMARY_FORMAT.format(summary=summary)
