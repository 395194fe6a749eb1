"""The context guard: targets, verdicts and tiers (docs/concepts/guard.md#verdicts).

Per provider target the guard decides whether the projected context fits
(ok / skip / final, docs/concepts/guard.md#targets); the compaction tiers sit below the limit
(docs/concepts/guard.md#thresholds). Together they give one session status, ordered ok < compact <
block < final (DESIGN.md, "Defaults where the specs disagree"):

- ``ok``      — below compact_at of the preferred target;
- ``compact`` — at or above compact_at: compact in the background;
- ``block``   — at or above block_at: compact synchronously before the next call;
- ``final``   — no target fits: force the final turn (docs/concepts/guard.md#final-turn).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contextsvc.engine.budget import Limits, Thresholds
from contextsvc.engine.errors import EngineValidationError

GuardStatus = Literal["ok", "compact", "block", "final"]
TargetStatus = Literal["ok", "skip", "final"]
GuardLog = Callable[[str, dict[str, Any]], None]

# Rank used to compare statuses (and by callers that want "at least compact").
STATUS_RANK: dict[str, int] = {"ok": 0, "compact": 1, "block": 2, "final": 3}

# docs/concepts/guard.md#final-turn: forcedFinalTurnReason = 'context'.
FINAL_REASON_CONTEXT = "context"


@dataclass(frozen=True, slots=True)
class GuardCounters:
    """docs/concepts/guard.md#counters (currentCtxTokens, pendingCtxTokens, …)."""

    current: int
    pending: int = 0
    new: int = 0
    extra: int = 0
    schema: int = 0

    def __post_init__(self) -> None:
        for field in ("current", "pending", "new", "extra", "schema"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise EngineValidationError(
                    f"{field} must be a non-negative integer, got {value!r}", field=field
                )

    @property
    def projected(self) -> int:
        # docs/concepts/guard.md#projection: current + pending + new + extra.
        # schema is not added: it is already inside current (docs/concepts/guard.md#projection),
        # and only used for the schema-only-overflow special case.
        return self.current + self.pending + self.new + self.extra


@dataclass(frozen=True, slots=True)
class Target:
    """A provider/model the request may go to, in preference order."""

    provider: str
    model: str
    limits: Limits


@dataclass(frozen=True, slots=True)
class TargetVerdict:
    provider: str
    model: str
    status: TargetStatus
    projected: int
    limit: int
    context_window: int
    buffer_tokens: int
    max_output_tokens: int
    schema_only_overflow: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "status": self.status,
            "projected": self.projected,
            "limit": self.limit,
            "context_window": self.context_window,
            "buffer_tokens": self.buffer_tokens,
            "max_output_tokens": self.max_output_tokens,
            "schema_only_overflow": self.schema_only_overflow,
        }


@dataclass(frozen=True, slots=True)
class GuardResult:
    """The session-level verdict. ``limit``/``compact_at``/``block_at`` are the
    preferred (first) target's; per-target limits are in ``targets``."""

    status: GuardStatus
    projected: int
    limit: int
    compact_at: int
    block_at: int
    targets: tuple[TargetVerdict, ...]
    schema_only_overflow: bool
    reason: str | None

    @property
    def primary(self) -> TargetVerdict | None:
        """The target the request goes to: the first that fits (None when final)."""
        return next((t for t in self.targets if t.status == "ok"), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "projected": self.projected,
            "limit": self.limit,
            "compact_at": self.compact_at,
            "block_at": self.block_at,
            "schema_only_overflow": self.schema_only_overflow,
            "reason": self.reason,
            "targets": [t.to_dict() for t in self.targets],
        }


def evaluate_guard(
    counters: GuardCounters,
    targets: Sequence[Target],
    thresholds: Thresholds,
    *,
    log: GuardLog | None = None,
) -> GuardResult:
    """docs/concepts/guard.md#targets + docs/concepts/guard.md#verdicts.

    Per target: it fits when ``projected <= limit``; if only the schema tokens
    overflow (``projected - schema <= limit``) it still fits, flagged
    ``schema_only_overflow`` (docs/concepts/guard.md#schema-only-overflow). A target that does not
    fit is ``skip`` when another one fits, and every target is ``final`` when
    none does.

    The tiers are measured against the *preferred* target (the first): once it
    no longer fits, the projection is past its block_at, so the session is
    ``block`` even while a fallback target still serves the request. Measuring
    against whichever target happens to fit would let the status fall from
    ``block`` back to ``ok`` as the projection grows past the first limit onto a
    larger fallback, breaking the ok < compact < block < final order.
    """
    if not targets:
        raise EngineValidationError("The context guard needs at least one target", field="targets")
    projected = counters.projected
    if log is not None:
        log(
            "context-guard/evaluate",
            {
                "projectedTokens": projected,
                "currentCtxTokens": counters.current,
                "pendingCtxTokens": counters.pending,
                "newCtxTokens": counters.new,
                "schemaCtxTokens": counters.schema,
                "extraTokens": counters.extra,
            },
        )

    fits: list[bool] = []
    schema_only: list[bool] = []
    for target in targets:
        limits = target.limits
        limit = limits.limit
        if log is not None:
            log(
                "context-guard/evaluate-target",
                {
                    "provider": target.provider,
                    "model": target.model,
                    "contextWindow": limits.context_window,
                    "bufferTokens": limits.buffer_tokens,
                    "maxOutputTokens": limits.max_output_tokens,
                    "limit": limit,
                },
            )
        if projected <= limit:
            fits.append(True)
            schema_only.append(False)
        elif projected - counters.schema <= limit:
            # docs/concepts/guard.md#schema-only-overflow: the base projection fits, only the schema
            # estimate (already inside current, and scaled ×2.09) overflows.
            fits.append(True)
            schema_only.append(True)
        else:
            fits.append(False)
            schema_only.append(False)

    any_fits = any(fits)
    verdicts = tuple(
        TargetVerdict(
            provider=target.provider,
            model=target.model,
            status="ok" if fit else ("skip" if any_fits else "final"),
            projected=projected,
            limit=target.limits.limit,
            context_window=target.limits.context_window,
            buffer_tokens=target.limits.buffer_tokens,
            max_output_tokens=target.limits.max_output_tokens,
            schema_only_overflow=so,
        )
        for target, fit, so in zip(targets, fits, schema_only, strict=True)
    )

    blocked = [
        {"provider": v.provider, "model": v.model, "limit": v.limit, "projected": v.projected}
        for v in verdicts
        if v.status != "ok"
    ]
    if log is not None:
        for v in verdicts:
            log(
                "context-guard/provider-eval",
                {"provider": v.provider, "model": v.model, "status": v.status, "blocked": blocked},
            )

    preferred_limit = targets[0].limits.limit
    compact_at = thresholds.compact_at(preferred_limit)
    block_at = thresholds.block_at(preferred_limit)

    status: GuardStatus
    reason: str | None = None
    primary = next((v for v in verdicts if v.status == "ok"), None)
    if primary is None:
        # docs/concepts/guard.md#final-turn: all providers blocked → force the final turn.
        status = "final"
        reason = FINAL_REASON_CONTEXT
        if log is not None:
            log(
                "context-guard/enforce",
                {"reason": reason, "projectedTokens": projected, "blocked": blocked},
            )
    elif projected >= block_at:
        status = "block"
    elif projected >= compact_at:
        status = "compact"
    else:
        status = "ok"

    return GuardResult(
        status=status,
        projected=projected,
        limit=preferred_limit,
        compact_at=compact_at,
        block_at=block_at,
        targets=verdicts,
        schema_only_overflow=primary.schema_only_overflow if primary is not None else False,
        reason=reason,
    )
