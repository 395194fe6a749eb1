"""The session's guard figures and its final status: the writes the append path,
the tool budget and the context build share, and the one reading of "used" that
the session list, the inspector and the guard all show (docs/dashboard.md#used).
"""

from __future__ import annotations

from django.utils import timezone

from contextsvc.engine.guard import STATUS_RANK

from . import accounting
from .models import Session


def refresh_guard(session: Session) -> accounting.BudgetState:
    """Recompute the budget and set the guard figures on ``session`` (the caller saves).

    ``used_tokens`` stores the guard's own figure (its projection: the
    provider-calibrated estimate plus tokens reserved for pending tool
    results), so the list, the inspector and the badge read the number the
    guard decided on, not the raw component estimate."""
    state = accounting.compute_budget(session)
    session.guard_status = state.guard.status
    session.used_tokens = state.guard.projected
    return state


def usable_tokens(session: Session) -> int:
    """The usable window: window − buffer − reserved output (the guard's limit)."""
    return max(1, session.context_window - session.buffer_tokens - session.max_output_tokens)


def used_pct(used: int, usable: int) -> float:
    """ "used" as a % of the usable window, one decimal: the one rounding every page shows."""
    return round(100 * used / max(1, usable), 1)


def level_of(session: Session, used: int) -> str:
    """The guard status ``used`` tokens alone reach: ok / compact / block."""
    thresholds = accounting.thresholds_of(session)
    usable = usable_tokens(session)
    if used >= thresholds.block_at(usable):
        return "block"
    if used >= thresholds.compact_at(usable):
        return "compact"
    return "ok"


def badge_status(session: Session, used: int | None = None, guard: str | None = None) -> str:
    """The badge, derived from the same "used" figure as the percentage beside it.

    A session marked final stays final; otherwise the higher of the stored
    guard verdict and the level ``used`` reaches, so a badge never says "ok"
    (or "compact") next to a figure at or over the block threshold — 100 %
    and over is always at least "block"."""
    if session.status == Session.Status.FINAL:
        return "final"
    stored = guard or session.guard_status or "ok"
    figure = level_of(session, session.used_tokens if used is None else used)
    return stored if STATUS_RANK.get(stored, 0) >= STATUS_RANK[figure] else figure


def session_mark_final(*, session: Session, reason: str) -> Session:
    """docs/concepts/guard.md#final-sticks: forcedFinalTurnReason is set once and sticks."""
    updated = Session.objects.filter(pk=session.pk, status=Session.Status.ACTIVE).update(
        status=Session.Status.FINAL, final_reason=reason, updated_at=timezone.now()
    )
    if updated:
        session.status = Session.Status.FINAL
        session.final_reason = reason
    return session
