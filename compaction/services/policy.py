"""Compaction policy: which strategies run, how small they make the window, and when.

Pure reads of a session's policy and budget; nothing here writes.
"""

from __future__ import annotations

import math
from typing import Any

from contextsvc.engine.guard import STATUS_RANK
from contextsvc.engine.strategies.chain import DEFAULT_CHAIN, validate_chain
from sessions import accounting
from sessions.models import Session

# After a compaction the context is at most this share of the effective window
# (hysteresis: compacting to just under the trigger would trigger again on the
# next message). Lowered below the trigger when a policy triggers earlier.
DEFAULT_TARGET_RATIO = 0.7


def compaction_policy(session: Session) -> dict[str, Any]:
    """A copy of the session policy's ``compaction`` block (empty when unset)."""
    return dict((session.policy or {}).get("compaction") or {})


def resolve_chain(session: Session, strategy: str | None) -> tuple[str, ...]:
    """The strategies a run executes: the request's, else the policy's chain or
    strategy, else DESIGN.md's default chain."""
    policy = compaction_policy(session)
    if strategy in (None, "", "chain"):
        if policy.get("chain"):
            return validate_chain(policy["chain"])
        if policy.get("strategy") and policy["strategy"] != "chain":
            return validate_chain([policy["strategy"]])
        return DEFAULT_CHAIN
    return validate_chain([strategy])


def _trigger_ratio(
    session: Session, state: accounting.BudgetState, chain: tuple[str, ...]
) -> float:
    policy = compaction_policy(session)
    if policy.get("threshold_ratio"):
        # spec 000 §2.2 thresholdRatio (0.8 there): kept as configuration.
        return float(policy["threshold_ratio"])
    if chain == ("sandwich",):
        # spec 004: the sandwich compresses at 70 %.
        return float(policy.get("sandwich_threshold", 0.7))
    return state.budget.thresholds.compact_ratio


def target_tokens(session: Session, state: accounting.BudgetState, chain: tuple[str, ...]) -> int:
    """Window tokens (retain + summary + live messages) the chain stops at.

    The context target is ``target_ratio`` of the effective window; what is not
    the window (system, skills, tool descriptions, reservations, and the
    provider's calibration when it counts more than we do) comes off it.
    """
    policy = compaction_policy(session)
    ratio = float(policy.get("target_ratio") or DEFAULT_TARGET_RATIO)
    trigger = _trigger_ratio(session, state, chain)
    if ratio >= trigger:
        ratio = trigger * 0.8
    budget = state.budget
    fixed = budget.system_prompt + budget.skill_prompts + budget.tool_descriptions + state.reserved
    calibration = max(0, (state.calibrated or state.estimated) - state.estimated)
    return max(0, math.floor(ratio * budget.effective_window) - fixed - calibration)


def should_auto_compact(
    session: Session, state: accounting.BudgetState, chain: tuple[str, ...]
) -> bool:
    """Is an automatic compaction due (spec 002 §3 compact tier, or spec 000's ratio)?"""
    policy = compaction_policy(session)
    if not policy.get("enabled", True) or not policy.get("auto", True):
        return False  # spec 000 §2.5: enabled=false / auto=false → no automatic compaction
    if session.status != Session.Status.ACTIVE:
        return False
    if STATUS_RANK[state.guard.status] >= STATUS_RANK["compact"]:
        return True
    if policy.get("threshold_ratio") or chain == ("sandwich",):
        ratio = _trigger_ratio(session, state, chain)
        return state.guard.projected >= math.floor(ratio * state.budget.effective_window)
    return False


def limit_tokens(session: Session, state: accounting.BudgetState) -> int:
    """The hard limit for the window (retain + summary + live messages): what
    the effective window leaves after the fixed parts, the reservations and
    the provider's calibration. Cutting inside the newest turn aims here
    (spec 003 emergency path), never at the lower ``target_tokens``."""
    budget = state.budget
    fixed = budget.system_prompt + budget.skill_prompts + budget.tool_descriptions + state.reserved
    calibration = max(0, (state.calibrated or state.estimated) - state.estimated)
    return max(0, budget.effective_window - fixed - calibration)
