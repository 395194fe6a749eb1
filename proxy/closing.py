"""What a proxied call writes from a thread of its own: the build's record, and a reply
whose stream ended early (the client went away), with the call's outcome."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from contextsvc.engine.providers.common import Reply
from sessions.models import Session

from .outcome import write_outcome
from .pooled import release_connections
from .providers import Dialect
from .services.reply import session_record_reply

logger = logging.getLogger("proxy.relay")


def write_record(record: Callable[[], int | None], session: str) -> int | None:
    """Run ``record`` (``Prepared.record``); its ``ContextCall`` id, None if it failed (logged)."""
    try:
        return record()
    except Exception:
        logger.exception("proxy: could not record the build of session %s", session)
        return None
    finally:
        release_connections()


def record_closing(
    session: Session,
    dialect: Dialect,
    reply: Reply,
    final_tool: str | None,
    started_ns: int,
    record: Callable[[], int | None] | None = None,
    outcome: tuple[int | None, dict[str, Any]] | None = None,
) -> None:
    """Store a reply from outside the request's thread (the build's record first, if
    not written yet, and ``outcome``: the record's id and its outcome fields), then
    close that thread's connections."""
    record_id = outcome[0] if outcome is not None else None
    if record is not None:
        record_id = write_record(record, session.external_id)
    if outcome is not None:
        write_outcome(record_id, session.pk, outcome[1])
    try:
        session_record_reply(
            session=session,
            dialect=dialect,
            reply=reply,
            response=None,
            final_tool=final_tool,
            started_ns=started_ns,
        )
    except Exception:
        logger.exception("proxy: could not store the reply of session %s", session.external_id)
    finally:
        release_connections()
