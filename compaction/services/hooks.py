"""What the sessions registry calls: the auto-trigger, the preflight, the 80 % note.

Registered in ``CompactionConfig.ready()`` (``sessions.extensions.REGISTRY``);
sessions never imports compaction.
"""

from __future__ import annotations

import logging

from django.conf import settings

from contextsvc.engine.budget import usage_note
from sessions import accounting
from sessions.models import Session

from .. import leases, reasons, selectors
from ..models import CompactionRun
from .policy import auto_decision, compaction_policy, resolve_chain
from .requests import compaction_auto_request, compaction_request
from .sync import compaction_run_bounded

logger = logging.getLogger("contextsvc.compaction")

Trigger = CompactionRun.Trigger
Status = CompactionRun.Status


def on_session_activity(session: Session, state: accounting.BudgetState, last_role: str) -> None:
    """``REGISTRY.after_append``: the check points (docs/concepts/compaction.md#check-points).

    Runs after the append/usage transaction committed: after an assistant
    message (an LLM call ended), after tool results, and on reported usage.
    Never raises: the append already succeeded.
    """
    if last_role not in ("assistant", "tool", "usage", "tool_overflow"):
        return
    if not settings.CONTEXTSVC_AUTO_COMPACT:
        return
    try:
        chain = resolve_chain(session, None)
        if last_role == "tool_overflow":
            # A tool output that could not fit (shown cut or trimmed) makes compaction
            # due at once, whatever the tier (the tool-output preflight on append).
            decided = ("compact", reasons.tool_overflow(session, state))
        else:
            decided = auto_decision(session, state, chain, check=last_role)
        # A run is due: unless the breaker is open or one is under way with a live
        # lease (one plain statement; the request's own checks cost ten times more).
        if decided is not None and not selectors.auto_waits(session):
            action, reason = decided
            # The planner's "clear": old tool outputs only, no summary call.
            strategy = "tool_clearing" if action == "clear" else None
            compaction_auto_request(session=session, strategy=strategy, reason=reason)
    except Exception:  # noqa: BLE001 - the append must not fail because of this
        logger.exception("auto-compaction trigger failed for session %s", session.pk)


def can_make_room(session: Session) -> bool:
    """``REGISTRY.compaction_available``: may an automatic
    compaction still run for this session?"""
    policy = compaction_policy(session)
    if not policy.get("enabled", True) or not policy.get("auto", True):
        return False
    if session.status != Session.Status.ACTIVE or not settings.CONTEXTSVC_AUTO_COMPACT:
        return False
    return not selectors.breaker_open_for(session)


def compact_before_call(session: Session, state: accounting.BudgetState) -> bool:
    """``REGISTRY.context_preflight``: at block or final, compact
    now, in the request, while compaction can make room
    (docs/concepts/guard.md#block-compacts-first). Joins (and runs) an automatic run already queued.
    Answers within ``CONTEXTSVC_CONTEXT_WAIT_SECONDS`` whatever the run does (a slow summary
    goes on in the background), and at once for a run that stopped beating.
    True when the window changed; a failed or unfinished run leaves the
    session as it was and the guard decides."""
    if not can_make_room(session):
        return False
    try:
        reason = reasons.with_policy_change(session, reasons.preflight(state))
        run, _ = compaction_request(
            session=session, trigger=Trigger.AUTO, reason=reason, enqueue=False
        )
        run = compaction_run_bounded(run, leases.context_wait_seconds())
    except Exception:  # noqa: BLE001 - the context must still be answered
        logger.exception("compaction before the call failed for session %s", session.pk)
        return False
    return run.status == Status.SUCCEEDED and bool(run.changed)


def context_note(session: Session, state: accounting.BudgetState) -> str | None:
    """``REGISTRY.context_notes``: the non-cacheable note (docs/concepts/guard.md#usage-note) above
    80 % usage."""
    return usage_note(state.budget.used, state.budget.effective_window)


def lock_runs_before_delete(session: Session) -> None:
    """``REGISTRY.before_delete``: lock the session's unfinished runs before its row.

    The apply takes the run row, then the session row; the delete takes them
    in the same order, so one waits for the other instead of deadlocking. An
    apply that comes after finds its run gone and writes nothing.
    """
    list(
        CompactionRun.objects.select_for_update()
        .filter(session_id=session.pk, status__in=CompactionRun.ACTIVE)
        .values_list("pk", flat=True)
    )
