"""Why a compaction run was requested (docs/concepts/compaction.md#reasons), with its numbers.

Every path that creates a run builds its reason here, at request time, and
``compaction_request`` refuses a run without one: the run keeps the numbers
that decided it even after the policy, the window or the counters moved on.
A reason is a plain dict (``CompactionRun.reason``): ``kind`` names the path,
the other keys are its figures, in tokens of the service's estimate.
``reason_text`` renders one as a sentence. Reads only.
"""

from __future__ import annotations

from typing import Any

from sessions import accounting
from sessions.models import AgentKey, PolicyChange, Session

from .models import CompactionRun

# The automatic paths: the hooks' check points and the preflight before a call.
THRESHOLD = "threshold"  # the guard's compact line (or above) was crossed
PLANNER = "planner"  # the cost planner: compacting (or clearing) pays, below the line
RATIO = "ratio"  # a fixed trigger: policy threshold_ratio or the sandwich's threshold
TOOL_OVERFLOW = "tool_overflow"  # an output did not fit even cut: due at once
PREFLIGHT = "preflight"  # block or final before a call: compacted in the request
# The others.
OVERFLOW = "overflow"  # the provider said "too long" (the emergency run)
MANUAL = "manual"
TOOL = "tool"  # the agent called compact_context
CLIENT = "client"  # the client compacted its own history through the proxy
KINDS = frozenset(
    {THRESHOLD, PLANNER, RATIO, TOOL_OVERFLOW, PREFLIGHT, OVERFLOW, MANUAL, TOOL, CLIENT}
)
# The kinds a policy change can explain: the lines they cross come from the policy.
POLICY_KINDS = frozenset({THRESHOLD, PLANNER, RATIO, PREFLIGHT})
POLICY_FIELDS = ("thresholds", "compaction")
MAX_POLICY_CHANGES = 3


def budget_numbers(state: accounting.BudgetState) -> dict[str, Any]:
    """The projection and the lines it is measured against, and what it is made of.

    ``used`` (the guard's projection) = ``fixed`` + ``history`` + ``calibration``
    + ``reserved`` + ``extra``: a run card's before/after counts the history
    only, so these parts say why a small history can stand at a high ``used``.
    """
    budget, guard = state.budget, state.guard
    out: dict[str, Any] = {
        "used": guard.projected,
        "compact_at": guard.compact_at,
        "block_at": guard.block_at,
        "window": budget.effective_window,
        "tier": guard.status,
        "history": budget.summary + budget.conversation,
        "fixed": budget.system_prompt + budget.skill_prompts + budget.tool_descriptions,
    }
    current = state.calibrated if state.calibrated is not None else state.estimated
    if current != state.estimated:
        # The provider's reported usage counted more (or fewer) than the estimate.
        out["calibration"] = current - state.estimated
    if state.reserved:
        out["reserved"] = state.reserved
    extra = guard.projected - current - state.reserved
    if extra > 0:
        out["extra"] = extra
    return out


def threshold(state: accounting.BudgetState, *, check: str) -> dict[str, Any]:
    """The guard stands at compact or above (``check``: the check point that saw it)."""
    numbers = budget_numbers(state)
    return {"kind": THRESHOLD, **numbers, "threshold": numbers["compact_at"], "check": check}


def preflight(state: accounting.BudgetState) -> dict[str, Any]:
    """Block or final before a call (``extra``: room the call asked for, GET /context)."""
    numbers = budget_numbers(state)
    return {"kind": PREFLIGHT, **numbers, "threshold": numbers["block_at"]}


def tool_overflow(session: Session, state: accounting.BudgetState) -> dict[str, Any]:
    """A tool output still over the limit once cut (the append's ``tool_overflow``):
    the newest such output's size before and after its cut."""
    row = (
        session.messages.filter(role="tool", trim_info__reason="overflow")
        .order_by("-seq")
        .values("seq", "token_count", "view_state", "trim_info")
        .first()
    )
    numbers = budget_numbers(state)
    out: dict[str, Any] = {"kind": TOOL_OVERFLOW, **numbers, "threshold": numbers["window"]}
    if row is not None:
        before = (row["trim_info"] or {}).get("tokens_before")
        out.update(
            seq=row["seq"],
            output_tokens=before if isinstance(before, int) else None,
            kept_tokens=row["token_count"],
            view=row["view_state"],
        )
    return out


def session_numbers(session: Session) -> dict[str, Any]:
    """The budget when a forced run was asked for (for context: no line decided it)."""
    return budget_numbers(accounting.compute_budget(session))


def manual_api(session: Session, key: AgentKey) -> dict[str, Any]:
    return {
        "kind": MANUAL,
        "via": "api",
        "key": key.name,
        "key_prefix": key.prefix,
        **session_numbers(session),
    }


def manual_dashboard(session: Session, operator: str) -> dict[str, Any]:
    return {"kind": MANUAL, "via": "dashboard", "operator": operator, **session_numbers(session)}


def tool_call(session: Session) -> dict[str, Any]:
    return {"kind": TOOL, "tool": "compact_context", **session_numbers(session)}


def client(session: Session, form: str) -> dict[str, Any]:
    """``form``: checkpoint (Codex's request), trigger (a compaction_trigger item) or
    compact (``POST /responses/compact``)."""
    return {"kind": CLIENT, "form": form, **session_numbers(session)}


def overflow(
    session: Session,
    *,
    source: str,
    reported_tokens: int | None = None,
    limit: int | None = None,
    previous_context_window: int | None = None,
) -> dict[str, Any]:
    """The provider said the context is too long (``source``: api, the client's
    POST /overflow; proxy, upstream's answer): the request's size and the
    maximum it names, when it names them, beside our estimate."""
    numbers = session_numbers(session)
    out: dict[str, Any] = {
        "kind": OVERFLOW,
        "source": source,
        **numbers,
        "context_window": session.context_window,
    }
    if reported_tokens is not None:
        out["reported_tokens"] = reported_tokens
    if limit is not None:
        out["limit"] = limit
    if previous_context_window is not None and previous_context_window != session.context_window:
        out["previous_context_window"] = previous_context_window
    return out


def with_policy_change(session: Session, reason: dict[str, Any]) -> dict[str, Any]:
    """``reason`` plus the threshold and compaction settings changed since the
    session's previous run: the lines it crossed may be new (2 small queries)."""
    if reason.get("kind") not in POLICY_KINDS:
        return reason
    previous = (
        CompactionRun.objects.filter(session=session)
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    changes = PolicyChange.objects.filter(session=session).order_by("-id")
    if previous is not None:
        changes = changes.filter(created_at__gt=previous)
    for change in changes[:10]:
        fields = [
            c
            for c in change.changes or []
            if str(c.get("field", "")).split(".")[0] in POLICY_FIELDS
        ]
        if fields:
            return {
                **reason,
                "policy_change": {
                    "actor": change.actor,
                    "after_seq": change.after_seq,
                    "changes": fields[:MAX_POLICY_CHANGES],
                },
            }
    return reason
