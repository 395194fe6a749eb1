"""Bearer agent keys for the API."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpRequest
from django.utils import timezone
from ninja.security import HttpBearer

from .models import AgentKey, hash_key

# Touch last_used_at at most this often: one write per request would double
# the cost of the append path for a timestamp nobody needs to the second.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class AgentKeyAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> AgentKey | None:
        if not token:
            return None
        key = AgentKey.objects.filter(key_hash=hash_key(token), revoked_at__isnull=True).first()
        if key is None:
            return None
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
            AgentKey.objects.filter(pk=key.pk).update(last_used_at=now)
        return key
