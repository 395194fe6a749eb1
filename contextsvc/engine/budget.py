"""Limits, thresholds, the component budget and the usage note
(docs/concepts/guard.md#effective-limit, docs/concepts/guard.md#thresholds,
docs/concepts/guard.md#component-budget).

One effective window everywhere: ``window - buffer - max_output`` (the guard's
limit, docs/concepts/guard.md#effective-limit): every threshold and share is a ratio of it
(docs/concepts/index.md#defaults).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.tokens import DEFAULT_TOKENIZER_SPEC, parse_tokenizer_spec

# docs/concepts/context-build.md#limit-resolution: DEFAULT_CONTEXT_WINDOW_TOKENS.
DEFAULT_CONTEXT_WINDOW = 131_072
# docs/concepts/context-build.md#limit-resolution: DEFAULT_CONTEXT_BUFFER_TOKENS.
DEFAULT_BUFFER_TOKENS = 8_192
# docs/concepts/guard.md#thresholds: compact at 95 %, block at 98 % of the effective window.
DEFAULT_COMPACT_RATIO = 0.95
DEFAULT_BLOCK_RATIO = 0.98
DEFAULT_TOKENIZER = DEFAULT_TOKENIZER_SPEC
# docs/concepts/guard.md#usage-note: above 80 % usage, a non-cacheable note.
USAGE_NOTE_RATIO = 0.8
USAGE_NOTE = (
    "[Context: {pct}% used. You can call compact_context to free space before continuing"
    " with large operations.]"
)


def floor_ratio(ratio: float, tokens: int) -> int:
    """``floor(ratio × tokens)`` in exact decimal arithmetic.

    Fraction(str(0.95)) is exactly 19/20; the float product 0.95 × 100 000 could
    land a hair under 95 000 and floor one token short of the documented line.
    """
    num, den = _exact(ratio)
    return (num * tokens) // den  # // floors, as math.floor would


@cache
def _exact(ratio: float) -> tuple[int, int]:
    # A handful of distinct ratios per process; parsing each once keeps the
    # guard's per-append arithmetic to two integer operations.
    exact = Fraction(str(ratio))
    return exact.numerator, exact.denominator


def _check_int(value: Any, field: str) -> int:
    # bool is an int subclass; True as a context window is a bug upstream, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise EngineValidationError(f"{field} must be an integer, got {value!r}", field=field)
    return value


@dataclass(frozen=True, slots=True)
class Limits:
    """A model's resolved limits (docs/concepts/guard.md#effective-limit).

    Validated on construction, so any ``Limits`` in the system has a positive
    effective window: every later subtraction can rely on it.
    """

    context_window: int
    max_output_tokens: int
    buffer_tokens: int = DEFAULT_BUFFER_TOKENS
    tokenizer: str = DEFAULT_TOKENIZER

    def __post_init__(self) -> None:
        _check_int(self.context_window, "context_window")
        _check_int(self.max_output_tokens, "max_output_tokens")
        _check_int(self.buffer_tokens, "buffer_tokens")
        if self.context_window <= 0:
            # docs/concepts/context-build.md#limit-validation: the message is fixed.
            raise EngineValidationError(
                "Context limit must be positive",
                field="context_window",
                details={"context_window": self.context_window},
            )
        if self.max_output_tokens < 0:
            raise EngineValidationError(
                f"max_output_tokens must not be negative, got {self.max_output_tokens}",
                field="max_output_tokens",
            )
        if self.buffer_tokens < 0:
            raise EngineValidationError(
                f"buffer_tokens must not be negative, got {self.buffer_tokens}",
                field="buffer_tokens",
            )
        if self.limit <= 0:
            raise EngineValidationError(
                "Effective context limit must be positive: context_window"
                f" {self.context_window} - buffer_tokens {self.buffer_tokens}"
                f" - max_output_tokens {self.max_output_tokens} = {self.limit}",
                field="context_window",
                details={
                    "context_window": self.context_window,
                    "buffer_tokens": self.buffer_tokens,
                    "max_output_tokens": self.max_output_tokens,
                    "effective_window": self.limit,
                },
            )

    @property
    def limit(self) -> int:
        # docs/concepts/guard.md#effective-limit: limit = window - buffer - max_output.
        # Invariants 2 and 3: the buffer is always subtracted and the output
        # space always carved out (reasoning lives inside max_output, invariant 6).
        return self.context_window - self.buffer_tokens - self.max_output_tokens

    @property
    def effective_window(self) -> int:
        # docs/concepts/guard.md#effective-limit: the same number (buffer 0 there).
        return self.limit

    def to_dict(self) -> dict[str, Any]:
        return {
            "context_window": self.context_window,
            "max_output_tokens": self.max_output_tokens,
            "buffer_tokens": self.buffer_tokens,
            "tokenizer": self.tokenizer,
            "effective_window": self.limit,
        }


# Gateways (LiteLLM, OpenRouter, Vercel's AI SDK) name a model
# "<provider>/<model>"; the limits are the model's own.
MODEL_PROVIDER_PREFIXES: frozenset[str] = frozenset({"anthropic", "openai", "google", "gemini"})


def split_model_id(model: str) -> tuple[str, str]:
    """``(provider, bare model)`` of a model id that may carry a provider prefix.

    ``anthropic/claude-sonnet-4-5`` → ``("anthropic", "claude-sonnet-4-5")``;
    ``openrouter/openai/gpt-4o`` → ``("openai", "gpt-4o")``: the last segment
    is the model, the nearest known provider segment before it names the
    provider. An id with no known provider prefix keeps its provider empty and
    its text whole (a ``/`` may be part of a local model's name).
    """
    segments = model.split("/")
    if len(segments) < 2:
        return "", model
    for i in range(len(segments) - 2, -1, -1):
        name = segments[i].strip().lower()
        if name in MODEL_PROVIDER_PREFIXES:
            rest = "/".join(segments[i + 1 :])
            return ("google" if name == "gemini" else name), rest
    return "", model


def _first_defined(key: str, sources: tuple[Mapping[str, Any] | None, ...]) -> Any:
    # docs/concepts/context-build.md#limit-resolution: the first source that defines a value wins;
    # None means "not set here", so an explicit null in a request falls through to the model
    # profile.
    for source in sources:
        if source is not None and source.get(key) is not None:
            return source[key]
    return None


def output_in_window(max_output: int, buffer: int, window: int) -> int:
    """docs/concepts/context-build.md#profile-output-cap: a profile's maximum output is for
    the profile's window; in a smaller one where it would leave no room it takes the
    default share, a quarter of the window."""
    return max(window // 4, 0) if max_output + buffer >= window else max_output


def resolve_limits(
    *,
    explicit: Mapping[str, Any],
    model: Mapping[str, Any] | None = None,
    provider: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Limits:
    """Resolve context_window / max_output_tokens / buffer_tokens / tokenizer.

    Each value comes from the first source that defines it: explicit (the
    session request) > model profile > provider profile > configured defaults >
    built-in constants (docs/concepts/context-build.md#limit-resolution).
    Keys other than the four are ignored, so whole profile rows can be passed.
    """
    sources = (explicit, model, provider, defaults)
    window = _first_defined("context_window", sources)
    max_output = _first_defined("max_output_tokens", sources)
    buffer = _first_defined("buffer_tokens", sources)
    tokenizer = parse_tokenizer_spec(_first_defined("tokenizer", sources))

    if max_output is not None and _check_int(max_output, "max_output_tokens") < 0:
        # Reported here, before it could be multiplied into a negative window below.
        raise EngineValidationError(
            f"max_output_tokens must not be negative, got {max_output}", field="max_output_tokens"
        )
    if window is None:
        if max_output is not None:
            # docs/concepts/context-build.md#window-from-max-output: with no window anywhere, window
            # = 4 × max output.
            window = max_output * 4
        else:
            window = DEFAULT_CONTEXT_WINDOW
    if max_output is None:
        # docs/concepts/context-build.md#limit-resolution: max output = floor(window / 4). Checked
        # first so a bad window reports itself, not a TypeError from the division.
        max_output = _check_int(window, "context_window") // 4
    if buffer is None:
        buffer = DEFAULT_BUFFER_TOKENS
    if (
        explicit.get("context_window") is not None
        and explicit.get("max_output_tokens") is None
        and isinstance(window, int)
        and isinstance(buffer, int)
    ):
        max_output = output_in_window(max_output, buffer, window)
    return Limits(
        context_window=window,
        max_output_tokens=max_output,
        buffer_tokens=buffer,
        tokenizer=tokenizer,
    )


@dataclass(frozen=True, slots=True)
class Thresholds:
    """docs/concepts/guard.md#thresholds two-tier thresholds, as ratios of the effective window."""

    compact_ratio: float = DEFAULT_COMPACT_RATIO
    block_ratio: float = DEFAULT_BLOCK_RATIO

    def __post_init__(self) -> None:
        for field in ("compact_ratio", "block_ratio"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise EngineValidationError(f"{field} must be a number, got {value!r}", field=field)
        # Strict order keeps the statuses ordered: ok < compact < block < final.
        if not 0 < self.compact_ratio < self.block_ratio <= 1:
            raise EngineValidationError(
                "Thresholds must satisfy 0 < compact_ratio < block_ratio <= 1, got"
                f" compact_ratio {self.compact_ratio}, block_ratio {self.block_ratio}",
                field="thresholds",
                details={"compact_ratio": self.compact_ratio, "block_ratio": self.block_ratio},
            )

    def compact_at(self, limit: int) -> int:
        # docs/concepts/guard.md#thresholds: compact_at = 0.95 * effective_window (in tokens,
        # floored).
        return floor_ratio(self.compact_ratio, limit)

    def block_at(self, limit: int) -> int:
        # docs/concepts/guard.md#thresholds: block_at = 0.98 * effective_window.
        return floor_ratio(self.block_ratio, limit)


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """The component budget (docs/concepts/guard.md#component-budget), thresholds
    (docs/concepts/guard.md#thresholds) and history budget
    (docs/concepts/context-build.md#history-budget)."""

    limits: Limits
    system_prompt: int = 0
    skill_prompts: int = 0
    tool_descriptions: int = 0
    summary: int = 0
    conversation: int = 0
    thresholds: Thresholds = Thresholds()

    def __post_init__(self) -> None:
        for field in (
            "system_prompt",
            "skill_prompts",
            "tool_descriptions",
            "summary",
            "conversation",
        ):
            if _check_int(getattr(self, field), field) < 0:
                raise EngineValidationError(f"{field} must not be negative", field=field)

    @property
    def effective_window(self) -> int:
        return self.limits.effective_window

    @property
    def used(self) -> int:
        # docs/concepts/guard.md#component-budget: sum of all components.
        return (
            self.system_prompt
            + self.skill_prompts
            + self.tool_descriptions
            + self.summary
            + self.conversation
        )

    @property
    def remaining(self) -> int:
        # docs/concepts/guard.md#component-budget; negative when over budget, deliberately
        # not clamped: the dashboard shows by how much.
        return self.effective_window - self.used

    @property
    def used_ratio(self) -> float:
        # docs/concepts/guard.md#component-budget (a ratio there); effective_window > 0 by Limits.
        return self.used / self.effective_window

    @property
    def used_pct(self) -> float:
        return round(self.used_ratio * 100, 2)

    @property
    def compact_at(self) -> int:
        return self.thresholds.compact_at(self.effective_window)

    @property
    def block_at(self) -> int:
        return self.thresholds.block_at(self.effective_window)

    @property
    def should_compact(self) -> bool:
        # docs/concepts/guard.md#thresholds: 0.95 × EffectiveWindow.
        return self.used >= self.compact_at

    @property
    def is_blocked(self) -> bool:
        # docs/concepts/guard.md#thresholds: 0.98 × EffectiveWindow.
        return self.used >= self.block_at

    @property
    def exceeds(self) -> bool:
        # docs/concepts/guard.md#thresholds: UsedTokens() > EffectiveWindow() (true overflow).
        return self.used > self.effective_window

    @property
    def history_budget(self) -> int:
        # docs/concepts/context-build.md#history-budget: history_budget = ContextWindow -
        # system_prompt - summary
        #           - tool_definitions - MaxTokens
        # (skill prompts are part of the system prompt there). that formula has
        # no buffer; the guard's limit still subtracts it, so this is the looser figure.
        return (
            self.limits.context_window
            - self.system_prompt
            - self.skill_prompts
            - self.summary
            - self.tool_descriptions
            - self.limits.max_output_tokens
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "context_window": self.limits.context_window,
            "max_output_tokens": self.limits.max_output_tokens,
            "buffer_tokens": self.limits.buffer_tokens,
            "effective_window": self.effective_window,
            "components": {
                "system_prompt": self.system_prompt,
                "skill_prompts": self.skill_prompts,
                "tool_descriptions": self.tool_descriptions,
                "summary": self.summary,
                "conversation": self.conversation,
            },
            "used": self.used,
            "remaining": self.remaining,
            "used_pct": self.used_pct,
            "thresholds": {
                "compact_at": self.compact_at,
                "block_at": self.block_at,
                "compact_ratio": self.thresholds.compact_ratio,
                "block_ratio": self.thresholds.block_ratio,
            },
            "history_budget": self.history_budget,
        }


def usage_note(used: int, effective_window: int, ratio: float = USAGE_NOTE_RATIO) -> str | None:
    """docs/concepts/guard.md#usage-note: the note once usage exceeds 80 %."""
    if effective_window <= 0 or used / effective_window <= ratio:
        return None
    return USAGE_NOTE.format(pct=math.floor(used * 100 / effective_window))
