"""The strategy chain: names, validation and ``run_chain`` (docs/concepts/compaction.md#chain,
docs/concepts/compaction.md#sandwich)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.strategies.base import (
    ContextState,
    StrategyContext,
    StrategyOutcome,
    StrategyReport,
    Window,
)
from contextsvc.engine.strategies.clearing import tool_clearing
from contextsvc.engine.strategies.dropping import drop_oldest_turns
from contextsvc.engine.strategies.fitting import fit_outputs, over_room
from contextsvc.engine.strategies.sandwich import sandwich
from contextsvc.engine.strategies.sliding import full_history, sliding_window
from contextsvc.engine.strategies.summary import summarize
from contextsvc.engine.strategies.tree import tree
from contextsvc.engine.system_carry import carry_system

STRATEGY_NAMES: tuple[str, ...] = (
    "tool_clearing",
    "summarize",
    "sandwich",
    "drop_oldest_turns",
    "sliding_window",
    "full_history",
    "tree",
)
# DESIGN.md: tool clearing → summarise (retain + summary, last 1 turn kept) → drop oldest turns.
DEFAULT_CHAIN: tuple[str, ...] = ("tool_clearing", "summarize", "drop_oldest_turns")
EMERGENCY_STRATEGY = "drop_oldest_turns"

STRATEGIES: dict[str, Callable[[Window, StrategyContext], StrategyOutcome]] = {
    "tool_clearing": tool_clearing,
    "summarize": summarize,
    "sandwich": sandwich,
    "drop_oldest_turns": drop_oldest_turns,
    "sliding_window": sliding_window,
    "full_history": full_history,
    "tree": tree,
}


def validate_chain(names: Sequence[str]) -> tuple[str, ...]:
    if not names:
        raise EngineValidationError("A strategy chain needs at least one strategy", field="chain")
    for name in names:
        if name not in STRATEGIES:
            raise EngineValidationError(
                f"Unknown strategy {name!r}; use one of {', '.join(STRATEGY_NAMES)}", field="chain"
            )
    return tuple(names)


@dataclass(slots=True)
class CompactResult:
    """docs/concepts/compaction.md#compact-result (plus the per-strategy reports)."""

    before_tokens: int
    after_tokens: int
    before_msg_count: int
    after_msg_count: int
    strategies_run: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "before_tokens": self.before_tokens,
            "after_tokens": self.after_tokens,
            "before_msg_count": self.before_msg_count,
            "after_msg_count": self.after_msg_count,
            "strategies_run": list(self.strategies_run),
        }


@dataclass(slots=True)
class ChainResult:
    window: Window
    result: CompactResult
    reports: list[StrategyReport]
    sandwich_state: ContextState | None = None
    # True when the cached sandwich state must be replaced (or cleared, with None).
    state_changed: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.result.strategies_run)


def run_chain(window: Window, names: Sequence[str], ctx: StrategyContext) -> ChainResult:
    """Run strategies in order until the window is at or under ``ctx.target_tokens``.

    Forced (a manual or tool request, like ``/compact``): every strategy runs
    fully whatever the usage — except that in a chain of several, the
    emergency link (dropping turns) only runs when the window is still over
    the target: it destroys turns instead of condensing them.
    """
    names = validate_chain(names)
    counter = ctx.counter
    original = window
    before_tokens = window.tokens(counter)
    before_count = window.message_count()
    reports: list[StrategyReport] = []
    state: ContextState | None = ctx.sandwich_state
    state_changed = False
    for name in names:
        if name == EMERGENCY_STRATEGY and len(names) > 1 and ctx.room_tokens is not None:
            # The deep target is a goal, the room a bound: turns are dropped (and
            # a one-turn history's outputs cleared) only when the kept outputs,
            # cut to their head and tail, still do not fit.
            if over_room(window, ctx):
                outcome = fit_outputs(window, ctx)
                reports.append(outcome.report)
                if outcome.report.applied:
                    window = outcome.window
            if not over_room(window, ctx):
                tokens = window.tokens(counter)
                count = window.message_count()
                reports.append(
                    StrategyReport(
                        name,
                        tokens,
                        tokens,
                        count,
                        count,
                        applied=False,
                        details={"skipped": "within the history room"},
                    )
                )
                continue
        tokens = window.tokens(counter)
        if tokens <= ctx.target_tokens and (
            not ctx.force or (name == EMERGENCY_STRATEGY and len(names) > 1)
        ):
            reports.append(
                StrategyReport(
                    name,
                    tokens,
                    tokens,
                    window.message_count(),
                    window.message_count(),
                    applied=False,
                    details={"skipped": "under the target"},
                )
            )
            if not ctx.force:
                break
            continue
        outcome = STRATEGIES[name](window, ctx)
        reports.append(outcome.report)
        if outcome.report.applied:
            window = outcome.window
            if name == "sandwich":
                if outcome.state_changed:
                    state, state_changed = outcome.sandwich_state, True
            elif state is not None:
                # docs/concepts/compaction.md#sandwich-cache: the cached state is cleared when the
                # strategy changes (the summary slot now holds another strategy's text).
                state, state_changed = None, True
    if window is not original:
        # The newest mid-conversation system instructions survive compaction.
        # The head (sandwich) is kept as messages: its instructions need no carrying.
        retain = carry_system(
            [*original.head, *original.messages],
            original.retain,
            [*window.head, *window.messages],
            window.retain,
        )
        if retain != window.retain:
            window = replace(window, retain=retain)
            if over_room(window, ctx) and not any(r.name == "fit_outputs" for r in reports):
                # The carried instructions took the room the kept outputs had.
                outcome = fit_outputs(window, ctx)
                reports.append(outcome.report)
                if outcome.report.applied:
                    window = outcome.window
    result = CompactResult(
        before_tokens=before_tokens,
        after_tokens=window.tokens(counter),
        before_msg_count=before_count,
        after_msg_count=window.message_count(),
        strategies_run=[r.name for r in reports if r.applied],
    )
    return ChainResult(
        window=window,
        result=result,
        reports=reports,
        sandwich_state=state,
        state_changed=state_changed,
    )
