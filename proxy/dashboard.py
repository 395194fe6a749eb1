"""The proxy in the session inspector: client compactions on the usage chart and in a panel.

Registered from ``ProxyConfig.ready()`` (``REGISTRY.window_events`` and
``REGISTRY.inspector_panels``); each reads one small table, one query, whatever
the session's length.
"""

from __future__ import annotations

from typing import Any

from sessions.extensions import WindowEvent
from sessions.models import Session

from .models import ClientCompaction

PANEL = "proxy/panels.html#client-compactions"
EVENT_KIND = "client_compaction"


def _rows(session: Session) -> list[ClientCompaction]:
    return list(ClientCompaction.objects.filter(session=session).order_by("id"))


def window_events(session: Session) -> list[WindowEvent]:
    """Where the client's own compactions restarted the live window, oldest first."""
    return [
        WindowEvent(row.marker_seq, row.start_seq, row.window_tokens, EVENT_KIND)
        for row in _rows(session)
    ]


def client_compactions_panel(session: Session) -> tuple[str, dict[str, Any]]:
    return PANEL, {"client_compactions": _rows(session), "session": session}
