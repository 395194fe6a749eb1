"""Recording a client's own compaction: the divergence rule ran, the dashboard shows it.

When Claude Code (or any client) replaces its history with its own summary,
its next call diverges from what it sent before. ``services.sync`` keeps
every stored message, appends a marker and the client's new view, and
restarts the live window there; this records where, so the operator sees the
client's compaction as an event (usage chart, the proxy panel) beside the
service's own compactions.
"""

from __future__ import annotations

from proxy.models import ClientCompaction
from sessions.models import Session


def session_record_client_compaction(*, session: Session, client_messages: int) -> ClientCompaction:
    """``session`` as read after the sync: its window starts at the client's new view."""
    start = session.window_start_seq
    return ClientCompaction.objects.create(
        session=session,
        marker_seq=max(0, start - 1),
        start_seq=start,
        client_messages=client_messages,
        window_tokens=session.used_tokens,
    )
