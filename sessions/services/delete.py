"""Deleting a session with everything hanging off it (messages, outputs, snapshots, runs …).

Every table that refers to a session does so with ``on_delete=CASCADE``, so
one ``delete()`` removes the transcript, the stored outputs and their chunks,
usage reports, idempotency records and the other apps' rows (compaction runs
and snapshots, prompting state, the proxy's client views and stored
responses). Side sessions keep existing (their ``parent`` becomes null).

Order of locks: the registry's ``before_delete`` hooks first (compaction
locks the session's runs, the order its apply takes), then the session row
``FOR UPDATE``, which waits for an append or a compaction in flight and keeps
new ones out until the rows are gone. A writer that then finds the row gone
fails with ``Session.DoesNotExist`` and writes nothing — a finishing
compaction cannot bring the session back.
"""

from __future__ import annotations

import logging

from django.db import transaction

from sessions.extensions import REGISTRY
from sessions.models import Session

logger = logging.getLogger("contextsvc.sessions")


def session_delete(*, session: Session) -> None:
    """Delete ``session`` and all its rows; deleting one already gone is a no-op."""
    with transaction.atomic():
        for hook in REGISTRY.before_delete:
            hook(session)
        locked = Session.objects.select_for_update().filter(pk=session.pk).only("pk").first()
        if locked is None:
            return
        locked.delete()
    logger.info("session %s (%s) deleted", session.external_id, session.pk)
