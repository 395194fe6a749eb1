"""Compaction policy: which strategies run, how small they make the window, and when.

Pure reads of a session's policy and budget; nothing here writes.
"""

from __future__ import annotations

import math
from typing import Any

from contextsvc.engine.guard import STATUS_RANK
from contextsvc.engine.planner import PlanDecision, PlannerInput, decide
from contextsvc.engine.strategies.chain import DEFAULT_CHAIN, validate_chain
from sessions import accounting
from sessions.models import Session

from .. import reasons

# After a compaction the context is at most this share of the effective window
# (hysteresis: compacting to just under the trigger would trigger again on the
# next message). Lowered below the trigger when a policy triggers earlier.
# Deep, so a compaction buys many calls. A share of the room left after the
# fixed part (``target_tokens``). bench/bench_policy.py on the shared
# trajectories, cost units (× the cheapest peer) / next-action recall at 32k and
# 16k (peer recall 0.896 and 0.787): 0.2 → 0.92× / 0.914 and 1.05× / 0.841;
# 0.15 → 0.87× / 0.895 (below the peer's) and 1.02× / 0.820.
DEFAULT_TARGET_RATIO = 0.2
# A summary's output costs 5× its input: short, but not so short that recall drops
# below the peers' (bench/bench_policy.py before the reland, target 0.2 of the
# window less the fixed part, cost × cheapest peer / recall,
# 32k and 16k): 2048 → 0.98× / 0.903, 1.08× / 0.814; 1024 → 0.95× / 0.914,
# 0.98× / 0.799; 768 → 0.93× / 0.909, 0.97× / 0.794; 512 → 0.90× / 0.892 (under
# the peer's 0.896), 0.93× / 0.781 (under 0.787). With views capped at insertion
# (tool_output_cache.view_share 0.02) recall no longer hangs on the summary's
# length: 768 → 0.78× / 0.916, 0.81× / 0.858; 512 → 0.76× / 0.912, 0.77× / 0.855
# (docs/compaction.md, "When to compact"; target 0.15 instead: 0.73× / 0.904, 0.78× / 0.848).
DEFAULT_SUMMARY_MAX_TOKENS = 512
# An LLM call adds about this many messages (the answer and a tool result).
MESSAGES_PER_CALL = 2


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
        # docs/concepts/compaction.md#threshold-ratio (0.8 there): kept as configuration.
        return float(policy["threshold_ratio"])
    if chain == ("sandwich",):
        # docs/concepts/compaction.md#sandwich-threshold: the sandwich compresses at 70 %.
        return float(policy.get("sandwich_threshold", 0.7))
    return state.budget.thresholds.compact_ratio


def _not_history(state: accounting.BudgetState) -> int:
    """What a compaction cannot shrink: system, skills, tool descriptions,
    reservations, and the provider's calibration when it counts more than we do."""
    budget = state.budget
    fixed = budget.system_prompt + budget.skill_prompts + budget.tool_descriptions + state.reserved
    calibration = max(0, (state.calibrated or state.estimated) - state.estimated)
    return fixed + calibration


def room_tokens(session: Session, state: accounting.BudgetState, chain: tuple[str, ...]) -> int:
    """The history room: window tokens (retain + summary + live messages) that fit
    under the compaction threshold once the fixed part is in. A compaction must
    get under it; the target is how far below it goes."""
    ceiling = math.floor(_trigger_ratio(session, state, chain) * state.budget.effective_window)
    return max(0, ceiling - _not_history(state))


def target_tokens(session: Session, state: accounting.BudgetState, chain: tuple[str, ...]) -> int:
    """Window tokens (retain + summary + live messages) the chain stops at.

    ``target_ratio`` of the room LEFT after the fixed part (system, skills, tool
    descriptions, reservations, calibration), not of the whole window: with a
    large fixed part (Claude Code sends ~17k tokens of tool schemas) a share of
    the window less the fixed part is 0, and every compaction would run the
    whole chain down to its emergency link.
    """
    policy = compaction_policy(session)
    ratio = float(policy.get("target_ratio") or DEFAULT_TARGET_RATIO)
    trigger = _trigger_ratio(session, state, chain)
    if ratio >= trigger:
        ratio = trigger * 0.8
    room = max(0, state.budget.effective_window - _not_history(state))
    return max(0, math.floor(ratio * room))


def planner_input(
    session: Session, state: accounting.BudgetState, chain: tuple[str, ...]
) -> PlannerInput:
    """The session's numbers for the cost-aware planner (no query: cached counters)."""
    policy = compaction_policy(session)
    budget = state.budget
    fixed = budget.system_prompt + budget.skill_prompts + budget.tool_descriptions
    live = max(1, session.live_message_count)
    per_call = MESSAGES_PER_CALL * session.conversation_tokens / live
    return PlannerInput(
        used=state.guard.projected,
        limit=budget.effective_window,
        fixed=fixed,
        floor=fixed + target_tokens(session, state, chain),
        per_call=max(1.0, per_call),
        summary_tokens=int(policy.get("summary_max_tokens") or DEFAULT_SUMMARY_MAX_TOKENS),
        ceiling=math.floor(_trigger_ratio(session, state, chain) * budget.effective_window),
        clearable=_clearable(session, policy, chain),
    )


def _clearable(session: Session, policy: dict[str, Any], chain: tuple[str, ...]) -> int:
    """About what clearing all but the newest outputs would free (the cached counter of
    untrimmed outputs in the window, less the kept ones' share); 0 without clearing.

    Off by default (``planner_clear``): on the shared trajectories, clears between
    compactions saved at 32k (0.93× instead of 0.95×) and cost more at 16k (1.04×
    instead of 0.98×) — bench/bench_policy.py."""
    if "tool_clearing" not in chain or not policy.get("planner_clear", False):
        return 0
    total = int(session.tool_output_tokens or 0)
    live = max(1, session.live_message_count)
    keep = int(policy.get("keep_tool_uses", 3))
    # Outputs are about half the live messages: the kept ones' share of the total.
    kept = total * min(1.0, keep / max(1.0, live / MESSAGES_PER_CALL))
    return max(0, int(total - kept))


def plan_decision(
    session: Session, state: accounting.BudgetState, chain: tuple[str, ...]
) -> PlanDecision | None:
    """The planner's verdict, or None when the policy triggers on a fixed ratio."""
    policy = compaction_policy(session)
    if policy.get("planner", "cost") != "cost" or chain in (("sandwich",), ("full_history",)):
        return None
    return decide(planner_input(session, state, chain))


def should_auto_compact(
    session: Session, state: accounting.BudgetState, chain: tuple[str, ...]
) -> bool:
    """Is an automatic compaction due (docs/concepts/guard.md#verdicts, or a fixed ratio,
    docs/concepts/compaction.md#threshold-ratio)?"""
    return auto_action(session, state, chain) is not None


def auto_action(
    session: Session, state: accounting.BudgetState, chain: tuple[str, ...]
) -> str | None:
    """The automatic run due now: ``"compact"`` (the chain), ``"clear"`` (old tool
    outputs only, the planner's cheaper move), or None."""
    decided = auto_decision(session, state, chain, check="")
    return decided[0] if decided is not None else None


def auto_decision(
    session: Session, state: accounting.BudgetState, chain: tuple[str, ...], *, check: str
) -> tuple[str, dict[str, Any]] | None:
    """``auto_action`` with its reason (docs/concepts/compaction.md#reasons): which line the
    projection crossed, with the numbers; ``check``: the check point asking."""
    policy = compaction_policy(session)
    if not policy.get("enabled", True) or not policy.get("auto", True):
        # docs/concepts/compaction.md#triggers: enabled=false / auto=false → no automatic compaction
        return None
    if session.status != Session.Status.ACTIVE or chain == ("full_history",):
        # full_history never compresses (docs/concepts/compaction.md#full-history); the guard still
        # protects
        return None
    if STATUS_RANK[state.guard.status] >= STATUS_RANK["compact"]:
        return "compact", reasons.threshold(state, check=check)
    ratio = _trigger_ratio(session, state, chain)
    ceiling = math.floor(ratio * state.budget.effective_window)
    fixed_line = {
        "kind": reasons.RATIO,
        **reasons.budget_numbers(state),
        "threshold": ceiling,
        "ratio": ratio,
        "setting": "sandwich_threshold" if chain == ("sandwich",) else "threshold_ratio",
        "check": check,
    }
    if policy.get("planner", "cost") == "cost" and chain not in (("sandwich",), ("full_history",)):
        inputs = planner_input(session, state, chain)
        decision = decide(inputs)
        if decision.action == "leave":
            return None
        if inputs.used >= inputs.ceiling:
            # Below the guard's line, so a threshold_ratio put the planner's ceiling lower.
            return decision.action, fixed_line
        return decision.action, {
            "kind": reasons.PLANNER,
            "action": decision.action,
            **reasons.budget_numbers(state),
            "threshold": decision.trigger,
            "floor": inputs.floor,
            "per_call": round(inputs.per_call),
            "cost": round(decision.cost, 1),
            "expected_calls": round(decision.expected_calls, 1),
            **({"clearable": inputs.clearable} if decision.action == "clear" else {}),
            "check": check,
        }
    if policy.get("threshold_ratio") or chain == ("sandwich",):
        return ("compact", fixed_line) if state.guard.projected >= ceiling else None
    return None


def limit_tokens(session: Session, state: accounting.BudgetState) -> int:
    """The hard limit for the window (retain + summary + live messages): what
    the effective window leaves after the fixed parts, the reservations and
    the provider's calibration. Cutting inside the newest turn aims here
    (docs/concepts/compaction.md#emergency), never at the lower ``target_tokens``."""
    return max(0, state.budget.effective_window - _not_history(state))


# The knobs the dashboard shows, with the value a session gets when it sets none.
KNOB_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("planner", "cost"),
    ("planner_clear", False),
    ("strategy", "chain"),
    ("target_ratio", DEFAULT_TARGET_RATIO),
    ("threshold_ratio", None),
    ("summary_max_tokens", DEFAULT_SUMMARY_MAX_TOKENS),
    ("summary_input_max_tokens", None),
    ("summary_reuse_cache", True),
    ("pin_task", True),
    ("incremental_summary", True),
    ("keep_tool_uses", 3),
    ("retain_last_turns", 1),
    ("keep_last_n", 20),
    ("chunk_size", 20),
    ("levels", 3),
    ("clear_min_bytes", 1024),
    ("clear_mode", "keep_recent"),
    ("adaptive_keep", False),
    ("sandwich_min_middle", 1),
    ("sandwich_sections", True),
    ("summary_role", "auto"),
)


def effective_knobs(session: Session) -> list[tuple[str, Any, bool]]:
    """``(name, value, set by the session)`` for every compaction knob."""
    policy = compaction_policy(session)
    return [
        (name, policy[name] if policy.get(name) is not None else default, name in policy)
        for name, default in KNOB_DEFAULTS
    ]
