"""The budget trim of tool outputs in context (docs/concepts/trimming.md#budget-trim): which outputs
to trim, and to what.

When the tool outputs in context exceed the budget, the oldest are replaced by
``[tool output trimmed; ref=…]``; with hysteresis, one trim frees enough room
that the next ones are turns away, so the request prefix a provider caches
does not move on every turn. Pure: token sizes in, a plan out.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.output_views import DEFAULT_TRIM_HYSTERESIS, ViewConfig

# An output is worth trimming only when its placeholder frees at least this
# many tokens (and at least the placeholder's own size): trimming a 234-byte
# output to save ~20 tokens breaks the cached prefix for nothing.
MIN_TRIM_SAVING = 64

# docs/concepts/trimming.md#tool-output-budget: budget = clamp(context_window * 0.25, 20_000,
# 60_000).
BUDGET_RATIO = 0.25
BUDGET_MIN = 20_000
BUDGET_MAX = 60_000


def tool_output_budget(
    config: ViewConfig, context_window: int, effective_window: int | None = None
) -> int:
    """docs/concepts/trimming.md#tool-output-budget: the explicit budget, else clamp(window × 0.25,
    20 000, 60 000).

    The clamp's 20,000 floor is sized for large windows: in a 16k-32k window
    it is more than the whole effective window, and trimming would never run.
    So the derived budget is also capped at half the effective window, which
    leaves every window of 128k and up exactly at the clamp's figure.
    """
    if config.context_budget_tokens is not None:
        return config.context_budget_tokens
    budget = int(min(max(context_window * BUDGET_RATIO, BUDGET_MIN), BUDGET_MAX))
    if effective_window is not None:
        budget = min(budget, max(1, effective_window // 2))
    return budget


def trim_target(budget: int, hysteresis: float) -> int:
    """Where one trim brings the total down to: (1 − hysteresis) × budget."""
    return math.floor(budget * (1 - hysteresis))


def trimmed_view(ref: str) -> str:
    """docs/concepts/trimming.md#budget-trim placeholder."""
    return f"[tool output trimmed; ref={ref}]"


@dataclass(frozen=True, slots=True)
class TrimCandidate:
    """An output in context that may be trimmed, oldest first."""

    key: Hashable
    tokens: int
    placeholder_tokens: int = 0  # what the placeholder replacing it costs

    def worth_trimming(self, min_saving: int = 0) -> bool:
        """Trimming must save at least what the placeholder costs, and ``min_saving``."""
        saving = self.tokens - self.placeholder_tokens
        return saving >= max(min_saving, self.placeholder_tokens)


@dataclass(frozen=True, slots=True)
class TrimPlan:
    trimmed: tuple[Hashable, ...]
    freed: int
    total_before: int
    total_after: int
    budget: int
    target: int

    @property
    def changed(self) -> bool:
        return bool(self.trimmed)


def plan_trim(
    total: int,
    budget: int,
    candidates: Iterable[TrimCandidate],
    *,
    hysteresis: float = DEFAULT_TRIM_HYSTERESIS,
    min_saving: int = 0,
) -> TrimPlan:
    """docs/concepts/trimming.md#budget-trim: which outputs to trim, oldest first.

    ``total`` is the tokens of all untrimmed outputs in context; ``candidates``
    lists them oldest → newest (lazily: only as many are read as get trimmed).
    Nothing happens while ``total <= budget``. Over it, the oldest go until the
    total is at most ``(1 − hysteresis) × budget``, so the next trims are
    several outputs away (the prefix stays put). The newest output is never a
    candidate: the model must see the result it just asked for. An output
    whose trim would save less than its placeholder costs (or less than
    ``min_saving``; the service passes ``MIN_TRIM_SAVING``) is never trimmed:
    it is skipped and stays counted.
    """
    if budget <= 0:
        raise EngineValidationError("The tool output budget must be positive", field="budget")
    if not 0 <= hysteresis < 1:
        raise EngineValidationError("trim_hysteresis must be in [0, 1)", field="trim_hysteresis")
    target = trim_target(budget, hysteresis)
    if total <= budget:
        return TrimPlan((), 0, total, total, budget, target)
    trimmed: list[Hashable] = []
    freed = 0
    remaining = total
    held: TrimCandidate | None = None
    for candidate in candidates:
        # One-candidate lookahead: ``held`` is trimmable only once a newer one exists.
        if held is not None and held.worth_trimming(min_saving):
            trimmed.append(held.key)
            freed += held.tokens
            remaining -= held.tokens
            if remaining <= target:
                held = None
                break
        held = candidate
    return TrimPlan(tuple(trimmed), freed, total, max(remaining, 0), budget, target)


def admit_outputs(
    outputs: Iterable[int], *, room: int, reclaimable: int, sticky: bool = False
) -> list[bool]:
    """docs/concepts/guard.md#tool-preflight for a batch of new outputs, decided before any trim.

    ``outputs`` are the new outputs' tokens in posting order, ``room`` what is
    left under the limit before them, ``reclaimable`` what trimming every older
    output could free. An output that does not fit even then is refused *now*,
    so no older output is trimmed for it; it takes no room, so a later, smaller
    output may still fit (``sticky``, docs/concepts/guard.md#sticky-refusal:
    every later output is refused too).
    """
    admitted: list[bool] = []
    refused = False
    for tokens in outputs:
        fits = not (sticky and refused) and tokens <= room + reclaimable
        if fits:
            room -= tokens
            if room < 0:
                reclaimable += room  # what the trim must now free for it
                room = 0
        else:
            refused = True
        admitted.append(fits)
    return admitted
