"""The agent keys page: every key with its sessions, and one key for a revoke."""

from __future__ import annotations

from django.db.models import Count, Max
from django.http import Http404

from sessions.models import AgentKey


def agent_keys() -> list[AgentKey]:
    """Every key with its session count and latest activity: 1 query."""
    return list(
        AgentKey.objects.annotate(
            session_count=Count("sessions"), last_session_at=Max("sessions__updated_at")
        ).order_by("revoked_at", "name", "id")
    )


def agent_key_for_operator(pk: int) -> AgentKey:
    """Any key by primary key, or 404."""
    key = AgentKey.objects.filter(pk=pk).first()
    if key is None:
        raise Http404("No such key")
    return key


def agent_key_or_none(pk: int | None) -> AgentKey | None:
    """The key the sessions list is filtered by, if it exists."""
    return AgentKey.objects.filter(pk=pk).first() if pk else None
