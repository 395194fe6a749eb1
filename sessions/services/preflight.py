"""Before an LLM call: let the registry's hooks make room at block or final
(docs/concepts/guard.md#block-compacts-first)."""

from __future__ import annotations

from sessions import accounting
from sessions.extensions import REGISTRY
from sessions.models import Session


def session_context_preflight(*, session: Session, extra: int = 0) -> Session:
    """At block or final, give the hooks a chance to make room.

    docs/concepts/guard.md#block-compacts-first: at block, compact first, so a session that
    compaction can save is not ended by the final turn (docs/concepts/guard.md#final-turn). Returns
    the session, re-read when a hook changed it.
    """
    if session.status != Session.Status.ACTIVE or not REGISTRY.context_preflight:
        return session
    state = accounting.compute_budget(session, extra=extra)
    if state.guard.status not in ("block", "final"):
        return session
    for hook in REGISTRY.context_preflight:
        if hook(session, state):
            session.refresh_from_db()
            break
    return session
