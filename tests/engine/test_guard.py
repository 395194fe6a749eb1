"""The context guard (docs/concepts/guard.md#targets, docs/concepts/guard.md#verdicts)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextsvc.engine.budget import Limits, Thresholds
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.guard import (
    STATUS_RANK,
    GuardCounters,
    Target,
    evaluate_guard,
)

# docs/concepts/guard.md#worked-example: limit 103,424.
GPT4 = Target(
    "openai", "gpt-4", Limits(context_window=128_000, max_output_tokens=16_384, buffer_tokens=8_192)
)
SMALL = Target(
    "local", "small", Limits(context_window=10_000, max_output_tokens=1_000, buffer_tokens=1_000)
)
LIMIT = 103_424


def _status(projected: int, targets=(GPT4,), schema: int = 0) -> str:
    return evaluate_guard(
        GuardCounters(current=projected, schema=schema), list(targets), Thresholds()
    ).status


def test_projection_is_current_pending_new_extra_not_schema_spec001():
    counters = GuardCounters(current=45_000, pending=2_000, new=500, extra=100, schema=3_000)
    assert counters.projected == 47_600
    result = evaluate_guard(counters, [GPT4], Thresholds())
    assert result.projected == 47_600
    assert result.limit == LIMIT


def test_tiers_spec002_and_final_spec001():
    compact_at = 98_252  # floor(0.95 × 103,424)
    block_at = 101_355  # floor(0.98 × 103,424)
    assert _status(compact_at - 1) == "ok"
    assert _status(compact_at) == "compact"
    assert _status(block_at - 1) == "compact"
    assert _status(block_at) == "block"
    # projected == limit still fits (docs/concepts/guard.md#projection: > limit triggers)
    assert _status(LIMIT) == "block"
    assert _status(LIMIT + 1) == "final"
    result = evaluate_guard(GuardCounters(current=0), [GPT4], Thresholds())
    assert (result.compact_at, result.block_at) == (compact_at, block_at)


def test_final_when_no_target_fits_spec001():
    result = evaluate_guard(GuardCounters(current=200_000), [GPT4, SMALL], Thresholds())
    assert result.status == "final"
    # docs/concepts/guard.md#final-turn: forcedFinalTurnReason = 'context'
    assert result.reason == "context"
    assert [t.status for t in result.targets] == ["final", "final"]
    assert result.primary is None


def test_skip_when_another_target_fits_spec001():
    # SMALL (limit 8,000) cannot take 50,000 tokens; GPT4 can → SMALL is skipped.
    result = evaluate_guard(GuardCounters(current=50_000), [SMALL, GPT4], Thresholds())
    assert [t.status for t in result.targets] == ["skip", "ok"]
    assert result.primary is not None and result.primary.model == "gpt-4"
    assert result.reason is None
    # The preferred target no longer fits: past its block line → compact synchronously.
    assert result.status == "block"
    assert result.limit == SMALL.limits.limit


def test_fallback_does_not_lower_status_below_block():
    # Just below SMALL's block line it is "compact"; just past its limit it must not
    # fall back to "ok" merely because GPT4 has room (ok < compact < block < final).
    small_limit = SMALL.limits.limit
    assert _status(small_limit - 200, targets=(SMALL, GPT4)) == "compact"
    assert _status(small_limit + 1, targets=(SMALL, GPT4)) == "block"


def test_schema_only_overflow_is_ok_spec001():
    # projected 103,500 > 103,424, but without the 3,000 schema tokens it fits.
    result = evaluate_guard(GuardCounters(current=103_500, schema=3_000), [GPT4], Thresholds())
    assert result.targets[0].status == "ok"
    assert result.targets[0].schema_only_overflow is True
    assert result.schema_only_overflow is True
    assert result.status == "block"  # allowed through, but past the block line
    # More than the schema overflows → final.
    result = evaluate_guard(GuardCounters(current=106_500, schema=3_000), [GPT4], Thresholds())
    assert result.status == "final"
    assert result.schema_only_overflow is False


def test_no_schema_flag_when_projection_fits():
    result = evaluate_guard(GuardCounters(current=1_000, schema=500), [GPT4], Thresholds())
    assert result.status == "ok"
    assert result.schema_only_overflow is False


def test_buffer_always_subtracted_spec001_invariant2():
    no_buffer = Target(
        "p", "m", Limits(context_window=100_000, max_output_tokens=10_000, buffer_tokens=0)
    )
    buffered = Target(
        "p", "m", Limits(context_window=100_000, max_output_tokens=10_000, buffer_tokens=5_000)
    )
    assert _status(88_000, targets=(no_buffer,)) != "final"
    assert _status(88_000, targets=(buffered,)) == "final"


def test_max_output_always_carved_out_spec001_invariant3():
    small_out = Target(
        "p", "m", Limits(context_window=100_000, max_output_tokens=1_000, buffer_tokens=0)
    )
    big_out = Target(
        "p", "m", Limits(context_window=100_000, max_output_tokens=20_000, buffer_tokens=0)
    )
    assert _status(90_000, targets=(small_out,)) != "final"
    assert _status(90_000, targets=(big_out,)) == "final"


def test_custom_thresholds_move_the_lines():
    result = evaluate_guard(
        GuardCounters(current=50_000), [GPT4], Thresholds(compact_ratio=0.4, block_ratio=0.5)
    )
    assert result.status == "compact"
    result = evaluate_guard(
        GuardCounters(current=52_000), [GPT4], Thresholds(compact_ratio=0.4, block_ratio=0.5)
    )
    assert result.status == "block"


def test_empty_targets_is_validation_error():
    with pytest.raises(EngineValidationError):
        evaluate_guard(GuardCounters(current=0), [], Thresholds())


def test_negative_counter_is_validation_error():
    with pytest.raises(EngineValidationError) as err:
        GuardCounters(current=10, new=-1)
    assert err.value.field == "new"


def test_debug_log_topics_and_payloads_spec001():
    events: list[tuple[str, dict]] = []
    counters = GuardCounters(current=45_000, pending=2_000, new=0, extra=0, schema=3_000)
    evaluate_guard(
        counters, [GPT4], Thresholds(), log=lambda topic, payload: events.append((topic, payload))
    )
    topics = [t for t, _ in events]
    assert topics == [
        "context-guard/evaluate",
        "context-guard/evaluate-target",
        "context-guard/provider-eval",
    ]
    assert events[0][1] == {
        "projectedTokens": 47_000,
        "currentCtxTokens": 45_000,
        "pendingCtxTokens": 2_000,
        "newCtxTokens": 0,
        "schemaCtxTokens": 3_000,
        "extraTokens": 0,
    }
    assert events[1][1] == {
        "provider": "openai",
        "model": "gpt-4",
        "contextWindow": 128_000,
        "bufferTokens": 8_192,
        "maxOutputTokens": 16_384,
        "limit": 103_424,
    }
    assert events[2][1] == {"provider": "openai", "model": "gpt-4", "status": "ok", "blocked": []}


def test_enforce_is_logged_only_when_final_spec001():
    events: list[tuple[str, dict]] = []
    evaluate_guard(
        GuardCounters(current=500_000),
        [SMALL, GPT4],
        Thresholds(),
        log=lambda t, p: events.append((t, p)),
    )
    topics = [t for t, _ in events]
    assert topics.count("context-guard/evaluate-target") == 2
    assert topics[-1] == "context-guard/enforce"
    enforce = events[-1][1]
    assert enforce["reason"] == "context"
    assert [b["model"] for b in enforce["blocked"]] == ["small", "gpt-4"]
    assert all(b["projected"] == 500_000 for b in enforce["blocked"])


def test_guard_result_to_dict_is_json_ready():
    result = evaluate_guard(GuardCounters(current=50_000), [SMALL, GPT4], Thresholds())
    data = json.loads(json.dumps(result.to_dict()))
    assert data["status"] == "block"
    assert data["projected"] == 50_000
    assert [t["status"] for t in data["targets"]] == ["skip", "ok"]
    assert set(data) == {
        "status",
        "projected",
        "limit",
        "compact_at",
        "block_at",
        "schema_only_overflow",
        "reason",
        "targets",
    }


# --- property: statuses are monotonic in the projection ---------------------

limits_st = st.builds(
    lambda window, out, buf: Limits(
        context_window=window, max_output_tokens=out, buffer_tokens=buf
    ),
    window=st.integers(min_value=2_000, max_value=300_000),
    out=st.integers(min_value=0, max_value=500),
    buf=st.integers(min_value=0, max_value=1_000),
)
targets_st = st.lists(
    st.builds(
        Target, provider=st.sampled_from(["a", "b"]), model=st.text(max_size=3), limits=limits_st
    ),
    min_size=1,
    max_size=4,
)
thresholds_st = (
    st.tuples(st.floats(min_value=0.01, max_value=0.99), st.floats(min_value=0.01, max_value=1.0))
    .filter(lambda t: t[0] < t[1])
    .map(lambda t: Thresholds(compact_ratio=t[0], block_ratio=t[1]))
)


@given(
    targets=targets_st,
    thresholds=thresholds_st,
    current=st.integers(min_value=0, max_value=100_000),
    schema=st.integers(min_value=0, max_value=20_000),
    extras=st.lists(st.integers(min_value=0, max_value=400_000), min_size=2, max_size=12),
)
def test_status_rank_never_decreases_as_extra_grows(targets, thresholds, current, schema, extras):
    ranks = [
        STATUS_RANK[
            evaluate_guard(
                GuardCounters(current=current, extra=e, schema=schema), targets, thresholds
            ).status
        ]
        for e in sorted(extras)
    ]
    assert ranks == sorted(ranks)


@given(
    targets=targets_st,
    thresholds=thresholds_st,
    projected=st.integers(min_value=0, max_value=400_000),
)
def test_verdicts_are_consistent(targets, thresholds, projected):
    result = evaluate_guard(GuardCounters(current=projected), targets, thresholds)
    statuses = {t.status for t in result.targets}
    # Either every target is final, or none is (docs/concepts/guard.md#targets: final means all
    # blocked).
    assert ("final" in statuses) == (statuses == {"final"}) == (result.status == "final")
    for verdict in result.targets:
        assert (verdict.status == "ok") == (projected <= verdict.limit)  # no schema here
        assert (
            verdict.limit
            == verdict.context_window - verdict.buffer_tokens - verdict.max_output_tokens
        )
    if result.status != "final":
        assert result.compact_at <= result.block_at <= result.limit
