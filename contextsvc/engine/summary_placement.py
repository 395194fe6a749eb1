"""Where the summary travels in a built context: a user message or the system role.

By default the summary is a user message after the retain; in the system role
it is the system prompt's last part or a system message
(docs/concepts/context-build.md#summary-placement), as in ``[Earlier conversation summary: …]``.
``engine.build`` places it; this module names the roles and resolves the policy's choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contextsvc.engine.messages import Message
from contextsvc.engine.recall import with_search_hint

# docs/concepts/context-build.md#summary-placement: retain and summary travel as user messages at
# the top.
RETAIN_HEADER = "[Retained context from earlier in this session]"
SUMMARY_HEADER = "[Summary of the earlier conversation]"

# docs/concepts/context-build.md#summary-placement: a system-role summary reads "[Earlier
# conversation summary: …]".
SYSTEM_SUMMARY_FORMAT = "[Earlier conversation summary: {summary}]"
SUMMARY_ROLES: tuple[str, ...] = ("user", "system")


def resolve_summary_role(compaction_policy: Mapping[str, Any] | None) -> str:
    """``policy.compaction.summary_role``: ``user``, ``system`` or ``auto``.

    ``auto`` (the default) is ``system`` when the session compacts with the rule of
    docs/concepts/compaction.md#sandwich sandwich (its summary is a system message) and ``user``
    otherwise.
    """
    policy = compaction_policy or {}
    role = policy.get("summary_role") or "auto"
    if role in SUMMARY_ROLES:
        return str(role)
    chain = list(policy.get("chain") or ())
    return "system" if policy.get("strategy") == "sandwich" or chain == ["sandwich"] else "user"


def system_summary_text(role: str, summary: str, search: bool = True) -> str:
    """The summary as system text when it travels in the system role, else "";
    with the search hint unless ``search`` is false (``recall.with_search_hint``)."""
    if role != "system" or not summary:
        return ""
    return SYSTEM_SUMMARY_FORMAT.format(summary=with_search_hint(summary, search))


def preamble(retain: str, summary: str, search_hint: bool = True) -> list[Message]:
    """Retain then summary as user messages (docs/concepts/context-build.md#summary-placement); the
    summary with the search hint (``recall.with_search_hint``), so what is counted is what is
    sent."""
    out = [Message(role="user", content=f"{RETAIN_HEADER}\n{retain}")] if retain else []
    if summary:
        text = with_search_hint(summary, search_hint)
        out.append(Message(role="user", content=f"{SUMMARY_HEADER}\n{text}"))
    return out
