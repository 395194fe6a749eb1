"""Limits, thresholds and the component budget (docs/concepts/guard.md#effective-limit,
docs/concepts/guard.md#thresholds, docs/concepts/guard.md#component-budget)."""

from __future__ import annotations

import json

import pytest

from contextsvc.engine.budget import (
    DEFAULT_BUFFER_TOKENS,
    DEFAULT_CONTEXT_WINDOW,
    ContextBudget,
    Limits,
    Thresholds,
    resolve_limits,
)
from contextsvc.engine.errors import EngineValidationError


def test_limit_formula_spec001():
    # docs/concepts/guard.md#worked-example: 128,000 − 8,192 − 16,384 = 103,424.
    limits = Limits(context_window=128_000, max_output_tokens=16_384, buffer_tokens=8_192)
    assert limits.limit == 103_424
    assert limits.effective_window == 103_424


def test_effective_window_is_spec002_formula_when_buffer_is_zero():
    # docs/concepts/guard.md#effective-limit: EffectiveWindow = Total − MaxOutputTokens.
    assert Limits(context_window=100_000, max_output_tokens=4_096, buffer_tokens=0).limit == 95_904


def test_defaults_spec001():
    limits = resolve_limits(explicit={})
    assert limits.context_window == DEFAULT_CONTEXT_WINDOW == 131_072
    assert limits.buffer_tokens == DEFAULT_BUFFER_TOKENS == 8_192
    assert limits.max_output_tokens == 32_768  # floor(131072 / 4)
    assert limits.tokenizer == "tiktoken:cl100k_base"
    assert limits.limit == 131_072 - 8_192 - 32_768


def test_max_output_defaults_to_floor_quarter_of_window_spec001():
    assert resolve_limits(explicit={"context_window": 100_003}).max_output_tokens == 25_000


def test_resolution_order_spec001():
    explicit = {"context_window": None, "max_output_tokens": 1_000}
    model = {"context_window": 64_000, "buffer_tokens": None, "tokenizer": None, "name": "m"}
    provider = {
        "context_window": 32_000,
        "max_output_tokens": 9_999,
        "buffer_tokens": 2_000,
        "tokenizer": "anthropic",
    }
    defaults = {"buffer_tokens": 4_000, "tokenizer": "approximate"}
    limits = resolve_limits(explicit=explicit, model=model, provider=provider, defaults=defaults)
    # Each key independently: first source that defines it (None is "not defined").
    assert limits.context_window == 64_000  # model beats provider; explicit None falls through
    assert limits.max_output_tokens == 1_000  # explicit beats provider
    assert limits.buffer_tokens == 2_000  # provider, because the model's is None
    assert limits.tokenizer == "anthropic"  # provider beats defaults

    limits = resolve_limits(explicit={}, provider={}, defaults=defaults)
    assert limits.buffer_tokens == 4_000
    assert limits.tokenizer == "approximate"

    limits = resolve_limits(explicit={"context_window": 50_000}, model=model, provider=provider)
    assert limits.context_window == 50_000


def test_window_from_max_tokens_spec003():
    # docs/concepts/context-build.md#window-from-max-output: ContextWindow = MaxTokens × 4 when no
    # window is configured anywhere.
    limits = resolve_limits(explicit={"max_output_tokens": 8_192})
    assert limits.context_window == 32_768
    limits = resolve_limits(explicit={}, model={"max_output_tokens": 16_000})
    assert limits.context_window == 64_000
    # A window configured at any level wins over the ×4 rule.
    limits = resolve_limits(
        explicit={"max_output_tokens": 8_192}, provider={"context_window": 200_000}
    )
    assert limits.context_window == 200_000


def test_cx_nt1_zero_context_window_is_validation_error():
    # docs/concepts/context-build.md#limit-validation: max_context_tokens > 0, VALIDATION_ERROR
    # "Context limit must be positive".
    for window in (0, -1):
        with pytest.raises(EngineValidationError) as err:
            resolve_limits(
                explicit={"context_window": window, "max_output_tokens": 0, "buffer_tokens": 0}
            )
        assert err.value.message == "Context limit must be positive"
        assert err.value.field == "context_window"
    # Also when constructed directly.
    with pytest.raises(EngineValidationError, match="^Context limit must be positive$"):
        Limits(context_window=0, max_output_tokens=0, buffer_tokens=0)


@pytest.mark.parametrize(
    ("explicit", "field"),
    [
        ({"max_output_tokens": -1}, "max_output_tokens"),
        ({"buffer_tokens": -1}, "buffer_tokens"),
        ({"context_window": "128000"}, "context_window"),
        ({"context_window": 128_000.0}, "context_window"),
        ({"buffer_tokens": True}, "buffer_tokens"),
    ],
)
def test_negative_or_non_integer_limits_are_validation_errors(explicit, field):
    with pytest.raises(EngineValidationError) as err:
        resolve_limits(explicit=explicit)
    assert err.value.field == field


def test_non_positive_effective_limit_names_the_numbers():
    with pytest.raises(EngineValidationError) as err:
        resolve_limits(explicit={"context_window": 16_000, "max_output_tokens": 8_000})
    # 16000 − 8192 − 8000 = −192
    for number in ("16000", "8192", "8000", "-192"):
        assert number in err.value.message
    assert err.value.details["effective_window"] == -192


def test_unknown_tokenizer_is_rejected_at_resolution():
    with pytest.raises(EngineValidationError, match="wordpiece"):
        resolve_limits(explicit={"tokenizer": "wordpiece"})
    assert resolve_limits(explicit={"tokenizer": "cl100k_base"}).tokenizer == "tiktoken:cl100k_base"


# --- thresholds -------------------------------------------------------------


def test_thresholds_095_098_spec002():
    limits = Limits(context_window=100_000, max_output_tokens=0, buffer_tokens=0)
    budget = ContextBudget(limits=limits)
    assert budget.compact_at == 95_000
    assert budget.block_at == 98_000
    assert Thresholds() == Thresholds(compact_ratio=0.95, block_ratio=0.98)


def test_threshold_tokens_are_floored_in_exact_arithmetic():
    # 0.57 × 100 is 56.99999999999999 in floats; the documented line is 57.
    assert Thresholds(compact_ratio=0.57, block_ratio=0.58).compact_at(100) == 57
    # floor, not round: 0.95 × 103 = 97.85 → 97.
    assert Thresholds().compact_at(103) == 97


@pytest.mark.parametrize(
    ("compact", "block"),
    [
        (0.98, 0.95),
        (0.9, 0.9),
        (0, 0.5),
        (-0.1, 0.5),
        (0.5, 1.01),
        (float("nan"), 0.9),
        ("0.9", 0.95),
    ],
)
def test_thresholds_must_be_ordered_within_0_1(compact, block):
    with pytest.raises(EngineValidationError):
        Thresholds(compact_ratio=compact, block_ratio=block)


def test_block_ratio_may_be_exactly_one():
    assert Thresholds(compact_ratio=0.5, block_ratio=1).block_at(1_000) == 1_000


# --- component budget -------------------------------------------------------


def _budget(**components: int) -> ContextBudget:
    limits = Limits(context_window=128_000, max_output_tokens=16_384, buffer_tokens=8_192)
    return ContextBudget(limits=limits, **components)


def test_used_and_remaining_spec002():
    budget = _budget(
        system_prompt=3_000,
        skill_prompts=1_000,
        tool_descriptions=2_000,
        summary=500,
        conversation=10_000,
    )
    assert budget.used == 16_500
    assert budget.remaining == 103_424 - 16_500
    assert budget.used_ratio == pytest.approx(16_500 / 103_424)
    assert budget.used_pct == round(16_500 / 103_424 * 100, 2) == 15.95
    assert not budget.exceeds


def test_remaining_goes_negative_and_exceeds_only_above_window_spec002():
    at_limit = _budget(conversation=103_424)
    assert at_limit.remaining == 0
    assert not at_limit.exceeds  # ExceedsBudget is UsedTokens() > EffectiveWindow()
    over = _budget(conversation=103_425)
    assert over.remaining == -1
    assert over.exceeds
    assert over.used_pct == 100.0


def test_should_compact_and_is_blocked_spec002():
    compact_at = _budget().compact_at
    block_at = _budget().block_at
    assert not _budget(conversation=compact_at - 1).should_compact
    assert _budget(conversation=compact_at).should_compact
    assert not _budget(conversation=compact_at).is_blocked
    assert _budget(conversation=block_at).is_blocked


def test_history_budget_spec003():
    # docs/concepts/context-build.md#history-budget: ContextWindow − system_prompt − summary −
    # tool_definitions − MaxTokens (skill prompts are part of the system prompt; no buffer in its
    # formula (docs/concepts/context-build.md#history-budget)).
    budget = _budget(
        system_prompt=5_000,
        skill_prompts=1_000,
        summary=2_000,
        tool_descriptions=3_000,
        conversation=40_000,
    )
    assert budget.history_budget == 128_000 - 5_000 - 1_000 - 2_000 - 3_000 - 16_384
    # The conversation itself does not shrink the history budget.
    assert (
        budget.history_budget
        == _budget(
            system_prompt=5_000, skill_prompts=1_000, summary=2_000, tool_descriptions=3_000
        ).history_budget
    )


def test_negative_component_is_validation_error():
    with pytest.raises(EngineValidationError) as err:
        _budget(conversation=-1)
    assert err.value.field == "conversation"


def test_budget_to_dict_is_json_ready_with_api_keys():
    budget = _budget(
        system_prompt=1, skill_prompts=2, tool_descriptions=3, summary=4, conversation=5
    )
    data = json.loads(json.dumps(budget.to_dict()))
    assert data == {
        "context_window": 128_000,
        "max_output_tokens": 16_384,
        "buffer_tokens": 8_192,
        "effective_window": 103_424,
        "components": {
            "system_prompt": 1,
            "skill_prompts": 2,
            "tool_descriptions": 3,
            "summary": 4,
            "conversation": 5,
        },
        "used": 15,
        "remaining": 103_409,
        "used_pct": 0.01,
        "thresholds": {
            "compact_at": 98_252,
            "block_at": 101_355,
            "compact_ratio": 0.95,
            "block_ratio": 0.98,
        },
        "history_budget": 128_000 - 1 - 2 - 3 - 4 - 16_384,
    }


def test_a_profiles_output_that_leaves_no_room_in_a_smaller_window_takes_the_default_share():
    """docs/concepts/context-build.md#profile-output-cap."""
    profile = {"context_window": 400_000, "max_output_tokens": 128_000}
    limits = resolve_limits(explicit={"context_window": 48_000}, model=profile)
    assert (limits.context_window, limits.max_output_tokens) == (48_000, 12_000)
    # A figure that fits is kept; one the request sets is never changed.
    roomy = resolve_limits(explicit={"context_window": 200_000}, model=profile)
    assert roomy.max_output_tokens == 128_000
    asked = resolve_limits(
        explicit={"context_window": 48_000, "max_output_tokens": 30_000}, model=profile
    )
    assert asked.max_output_tokens == 30_000
