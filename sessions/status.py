"""The session's guard figures and its final status: the writes the append path,
the tool budget and the context build share.
"""

from __future__ import annotations

from django.utils import timezone

from . import accounting
from .models import Session


def refresh_guard(session: Session) -> accounting.BudgetState:
    """Recompute the budget and set the guard figures on ``session`` (the caller saves).

    ``used_tokens`` is the guard's projection, the figure its verdict counts, so
    the list's usage and its badge never disagree (docs/dashboard.md#one-set-of-figures).
    """
    state = accounting.compute_budget(session)
    session.guard_status = state.guard.status
    session.used_tokens = state.guard.projected
    return state


def session_mark_final(*, session: Session, reason: str) -> Session:
    """docs/concepts/guard.md#final-sticks: forcedFinalTurnReason is set once and sticks."""
    updated = Session.objects.filter(pk=session.pk, status=Session.Status.ACTIVE).update(
        status=Session.Status.FINAL, final_reason=reason, updated_at=timezone.now()
    )
    if updated:
        session.status = Session.Status.FINAL
        session.final_reason = reason
    return session
