"""Session row → engine inputs: limits, thresholds, tokenizer, budget, guard.

Everything here reads only the session row's cached counters, never the
transcript: evaluating the budget costs the same at message 10 and 10,000.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from contextsvc.engine.budget import (
    ContextBudget,
    Limits,
    Thresholds,
    resolve_limits,
    split_model_id,
)
from contextsvc.engine.guard import GuardCounters, GuardResult, Target, evaluate_guard
from contextsvc.engine.output_trim import tool_output_budget, trim_target
from contextsvc.engine.output_views import resolve_view_config
from contextsvc.engine.tokens import EstimateConfig, Tokenizer, get_tokenizer

from .models import ModelProfile, Session

guard_log = logging.getLogger("contextsvc.guard")


def profile_rows(provider: str, model: str) -> tuple[ModelProfile | None, ModelProfile | None]:
    """(model profile, provider profile) rows of ``model``, either None when there is none.

    A dated model id ("claude-sonnet-4-5-20250929") matches its family row by
    the longest profile name it starts with; a provider prefix
    ("anthropic/claude-…") is not part of the name (``split_model_id``).
    """
    model = split_model_id(model)[1]
    rows = list(ModelProfile.objects.filter(provider=provider))
    provider_row = next((p for p in rows if p.model == ""), None)
    candidates = [p for p in rows if p.model and model.startswith(p.model)]
    model_row = max(candidates, key=lambda p: len(p.model), default=None)
    return model_row, provider_row


def profile_limits(provider: str, model: str) -> tuple[dict | None, dict | None]:
    """(model profile, provider profile) as limit dicts, for resolve_limits (``profile_rows``)."""
    model_row, provider_row = profile_rows(provider, model)
    return (
        model_row.as_limits() if model_row else None,
        provider_row.as_limits() if provider_row else None,
    )


def infer_provider(model: str) -> str:
    prefix, bare = split_model_id(model)
    if prefix:
        return prefix
    lowered = bare.lower()
    if lowered.startswith("claude"):
        return "anthropic"
    if lowered.startswith(("gpt", "o1", "o3", "o4", "chatgpt")):
        return "openai"
    if lowered.startswith("gemini"):
        return "google"
    return ""


def resolve_session_limits(*, provider: str, model: str, explicit: Mapping[str, Any]) -> Limits:
    model_limits, provider_limits = profile_limits(provider, model)
    return resolve_limits(explicit=explicit, model=model_limits, provider=provider_limits)


def limits_of(session: Session) -> Limits:
    return Limits(
        context_window=session.context_window,
        max_output_tokens=session.max_output_tokens,
        buffer_tokens=session.buffer_tokens,
        tokenizer=session.tokenizer,
    )


def thresholds_of(session: Session) -> Thresholds:
    t = (session.policy or {}).get("thresholds") or {}
    return Thresholds(compact_ratio=t.get("compact_at", 0.95), block_ratio=t.get("block_at", 0.98))


def estimate_config_of(session: Session) -> EstimateConfig:
    e = (session.policy or {}).get("estimate") or {}
    return EstimateConfig(**e) if e else EstimateConfig()


def tokenizer_of(session: Session) -> Tokenizer:
    return get_tokenizer(session.tokenizer)


def final_tool_name(session: Session) -> str:
    return (session.policy or {}).get("final_report_tool") or settings.CONTEXTSVC_FINAL_REPORT_TOOL


def uncounted_tools(session: Session) -> frozenset[str]:
    """Tools left out of the schema tokens (docs/concepts/guard.md#report-tools): the final-report
    and task-status tools, unless ``policy.count_report_tools`` counts them like any other."""
    policy = session.policy or {}
    if policy.get("count_report_tools"):
        return frozenset()
    status_tool = policy.get("task_status_tool") or settings.CONTEXTSVC_TASK_STATUS_TOOL
    return frozenset({final_tool_name(session), status_tool})


def targets_of(session: Session) -> list[Target]:
    targets = [
        Target(provider=session.provider or "", model=session.model, limits=limits_of(session))
    ]
    for t in (session.policy or {}).get("targets") or []:
        # Limits were resolved when the policy was saved (``sessions.services.sessions``).
        targets.append(
            Target(
                provider=t["provider"],
                model=t["model"],
                limits=Limits(
                    context_window=t["context_window"],
                    max_output_tokens=t["max_output_tokens"],
                    buffer_tokens=t["buffer_tokens"],
                    tokenizer=t.get("tokenizer") or session.tokenizer,
                ),
            )
        )
    return targets


@dataclass(frozen=True, slots=True)
class BudgetState:
    budget: ContextBudget
    guard: GuardResult
    estimated: int
    calibrated: int | None
    reserved: int
    # docs/concepts/guard.md#tool-preflight and the tool-output
    # budget (docs/concepts/trimming.md#tool-output-budget).
    tool_budget_exceeded: bool = False
    can_execute_tool: bool = True
    tool_outputs: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = self.budget.to_dict()
        out["guard"] = self.guard.to_dict()
        out["estimated_tokens"] = self.estimated
        out["calibrated_tokens"] = self.calibrated
        out["reserved_tokens"] = self.reserved
        out["tool_budget_exceeded"] = self.tool_budget_exceeded
        out["can_execute_tool"] = self.can_execute_tool
        out["tool_outputs"] = self.tool_outputs
        return out


def _debug_log(topic: str, payload: dict) -> None:
    guard_log.debug(json.dumps({"topic": topic, **payload}, default=str))


def compute_budget(session: Session, *, extra: int = 0) -> BudgetState:
    budget = ContextBudget(
        limits=limits_of(session),
        system_prompt=session.system_tokens,
        skill_prompts=session.skill_tokens,
        tool_descriptions=session.tool_tokens,
        summary=session.summary_tokens,
        conversation=session.conversation_tokens,
        thresholds=thresholds_of(session),
    )
    estimated = budget.used
    calibrated = None
    if session.reported_total is not None and session.estimated_at_report is not None:
        # The provider's count wins for the prefix it counted; what changed
        # since is our estimate (docs/concepts/context-build.md#calibration usage calibrates the
        # estimate).
        calibrated = max(0, session.reported_total + estimated - session.estimated_at_report)
    reserved = int(getattr(session, "reserved_tokens", 0) or 0)
    counters = GuardCounters(
        current=calibrated if calibrated is not None else estimated,
        pending=reserved,
        new=0,
        extra=max(0, extra),
        schema=session.tool_tokens,
    )
    guard = evaluate_guard(
        counters,
        targets_of(session),
        budget.thresholds,
        log=_debug_log if settings.CONTEXT_DEBUG else None,
    )
    exceeded = bool(getattr(session, "tool_budget_exceeded", False))
    return BudgetState(
        budget=budget,
        guard=guard,
        estimated=estimated,
        calibrated=calibrated,
        reserved=reserved,
        tool_budget_exceeded=exceeded,
        can_execute_tool=not exceeded
        and guard.status != "final"
        and session.status != Session.Status.FINAL,
        tool_outputs=_tool_outputs(session),
    )


def _tool_outputs(session: Session) -> dict[str, Any]:
    """docs/concepts/trimming.md#budget-trim: untrimmed tool-output tokens in context against their
    budget."""
    config = resolve_view_config((session.policy or {}).get("tool_output_cache"))
    budget = tool_output_budget(config, session.context_window, limits_of(session).limit)
    return {
        "enabled": config.enabled,
        "tokens": int(getattr(session, "tool_output_tokens", 0) or 0),
        "budget": budget,
        "trim_to": trim_target(budget, config.trim_hysteresis),
    }
