"""The proxy in the session inspector: the client's own compactions and a side session's parent.

Registered from ``ProxyConfig.ready()`` (``REGISTRY.inspector_panels``); one
small query whatever the session's length. The usage chart's marks come from
``selectors.window_events``.
"""

from __future__ import annotations

from typing import Any

from sessions.models import Session

from .models import ClientCompaction

PANEL = "proxy/panels.html#client-compactions"


def client_compactions_panel(session: Session) -> tuple[str, dict[str, Any]]:
    rows = list(ClientCompaction.objects.filter(session=session).order_by("id"))
    return PANEL, {"client_compactions": rows, "session": session}
