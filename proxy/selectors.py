"""Reads of the proxy's state: how much of a client's history the session already holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contextsvc.engine.providers.fingerprint import common_prefix

from .models import ClientView


def known_prefix(
    view: ClientView | None, current: list[str], messages: Sequence[dict[str, Any]]
) -> int:
    """How many leading client messages the session holds (``services.sync``: the echo rule)."""
    if view is None:
        return 0
    stored = view.fingerprints or []
    n = common_prefix(stored, current)
    at = view.reply_at
    if at is not None and n == at and n < len(current) and messages[n].get("role") == "assistant":
        n += 1 + common_prefix(stored[n + 1 :], current[n + 1 :])
    return n


def client_view(session_pk: int) -> ClientView | None:
    return ClientView.objects.filter(session_id=session_pk).first()
