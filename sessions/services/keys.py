"""Writes of agent keys: create (the raw key is shown once) and revoke."""

from __future__ import annotations

from django.utils import timezone

from contextsvc.errors import ValidationFailed
from sessions.models import AgentKey, hash_key


def agent_key_create(*, name: str) -> tuple[AgentKey, str]:
    """Create a key; the raw key is returned once and never stored."""
    if not name or len(name) > 100:
        raise ValidationFailed("Key name must be 1-100 characters", details={"field": "name"})
    raw = AgentKey.generate_raw_key()
    key = AgentKey.objects.create(name=name, prefix=raw[:10], key_hash=hash_key(raw))
    return key, raw


def agent_key_revoke(*, key: AgentKey) -> AgentKey:
    """Revoke ``key`` (once: a second revoke keeps the first time)."""
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key
