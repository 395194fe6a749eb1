"""Prompt-cache accounting: prefix identity between builds and cost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine import caching
from contextsvc.engine.caching import (
    DIGEST_BYTES,
    Prices,
    block_key,
    cached_after,
    chain,
    common_prefix_blocks,
    cost_usd,
    estimate_cache,
    estimate_costs,
)
from contextsvc.engine.errors import EngineValidationError


def keys(*labels: str) -> list[bytes]:
    return [block_key(label) for label in labels]


# --- prefix identity ---------------------------------------------------------------------


def test_chain_has_one_digest_per_block():
    assert len(chain(keys("a", "b", "c"))) == 3 * DIGEST_BYTES
    assert chain([]) == b""


def test_chain_goes_on_from_a_previous_builds_prefix():
    whole = keys("tools", "sys", "m1", "m2", "m3")
    for k in range(len(whole) + 1):  # incremental accounting hashes only the blocks past k
        assert chain(whole[k:], chain(whole[:k])) == chain(whole)


def test_common_prefix_of_identical_grown_and_changed_builds():
    base = chain(keys("tools", "sys", "m1", "m2"))
    assert common_prefix_blocks(base, base) == 4
    assert common_prefix_blocks(base, chain(keys("tools", "sys", "m1", "m2", "m3"))) == 4
    assert common_prefix_blocks(base, chain(keys("tools", "sys", "m1*", "m2"))) == 2
    assert common_prefix_blocks(base, chain(keys("tools*", "sys", "m1", "m2"))) == 0
    assert common_prefix_blocks(None, base) == 0


@settings(max_examples=200, deadline=None)
@given(
    a=st.lists(st.sampled_from("abc"), max_size=12), b=st.lists(st.sampled_from("abc"), max_size=12)
)
def test_common_prefix_matches_the_naive_definition(a, b):
    naive = 0
    while naive < min(len(a), len(b)) and a[naive] == b[naive]:
        naive += 1
    assert common_prefix_blocks(chain(keys(*a)), chain(keys(*b))) == naive


def build(labels, tokens, **kw):
    return estimate_cache(block_tokens=tokens, current=chain(keys(*labels)), **kw)


# --- the breakpoints model (Anthropic) ------------------------------------------------------


def test_first_build_writes_up_to_its_last_breakpoint():
    est = build(
        ["t", "s", "m1"], [1000, 2000, 500], previous=None, breakpoints=[1, 2], tail_tokens=20
    )
    assert est.expired is True
    assert (est.cache_read_tokens, est.cache_write_tokens, est.uncached_tokens) == (0, 3500, 20)
    assert est.input_tokens == 3520 and est.prefix_identical_tokens == 0


def test_next_build_reads_what_the_previous_one_cached():
    first = build(["t", "s", "m1"], [1000, 2000, 500], previous=None, breakpoints=[1, 2])
    cached = cached_after(first, [1, 2])
    second = build(
        ["t", "s", "m1", "m2"],
        [1000, 2000, 500, 300],
        previous=chain(keys("t", "s", "m1")),
        previous_cached=cached,
        breakpoints=[1, 3],
        elapsed_seconds=10,
        tail_tokens=20,
    )
    assert second.prefix_identical_blocks == 3 and second.prefix_identical_tokens == 3500
    assert second.cache_read_tokens == 3500  # the old moving breakpoint's entry
    assert second.cache_write_tokens == 300
    assert second.uncached_tokens == 20
    assert second.prefix_changed is False


def test_a_changed_message_falls_back_to_the_system_entry():
    prev = chain(keys("t", "s", "m1", "m2"))
    est = build(
        ["t", "s", "m1-trimmed", "m2", "m3"],
        [1000, 2000, 50, 300, 100],
        previous=prev,
        previous_cached=[1, 3],
        breakpoints=[1, 4],
        elapsed_seconds=10,
    )
    assert est.prefix_changed is True
    assert est.cache_read_tokens == 3000
    assert est.cache_write_tokens == 450


def test_nothing_is_read_after_the_ttl():
    prev = chain(keys("t", "s"))
    est = build(
        ["t", "s", "m"],
        [1000, 2000, 10],
        previous=prev,
        previous_cached=[1],
        breakpoints=[1, 2],
        elapsed_seconds=301,
        ttl="5m",
    )
    assert est.expired and est.cache_read_tokens == 0
    est = build(
        ["t", "s", "m"],
        [1000, 2000, 10],
        previous=prev,
        previous_cached=[1],
        breakpoints=[1, 2],
        elapsed_seconds=301,
        ttl="1h",
    )
    assert not est.expired and est.cache_read_tokens == 3000


def test_entries_shorter_than_the_minimum_are_not_read():
    prev = chain(keys("t", "s"))
    est = build(
        ["t", "s", "m"],
        [100, 200, 10],
        previous=prev,
        previous_cached=[1],
        breakpoints=[2],
        elapsed_seconds=1,
        min_cacheable=1024,
    )
    assert est.cache_read_tokens == 0


def test_lookback_is_limited_to_about_20_blocks():
    labels = ["t", "s", *[f"m{i}" for i in range(30)]]
    tokens = [1000, 1000, *[100] * 30]
    prev = chain(keys(*labels[:3]))
    far = build(
        labels, tokens, previous=prev, previous_cached=[1, 2], breakpoints=[31], elapsed_seconds=1
    )
    assert far.cache_read_tokens == 0  # block 2 is 29 blocks before the only marker
    near = build(
        labels,
        tokens,
        previous=prev,
        previous_cached=[1, 2],
        breakpoints=[1, 31],
        elapsed_seconds=1,
    )
    assert near.cache_read_tokens == 2000  # the system marker still finds its entry


def test_without_markers_nothing_is_cached():
    est = build(
        ["t", "s"],
        [1000, 2000],
        previous=chain(keys("t", "s")),
        previous_cached=[1],
        breakpoints=[],
        elapsed_seconds=1,
    )
    assert est.cache_read_tokens == est.cache_write_tokens == 0
    assert est.uncached_tokens == 3000 and est.prefix_identical_tokens == 3000


# --- automatic (OpenAI) and none --------------------------------------------------------------


def test_automatic_prefix_cache_reads_in_128_token_steps_from_1024():
    prev = chain(keys("t", "s", "m1"))
    est = build(
        ["t", "s", "m1", "m2"],
        [600, 500, 100, 50],
        previous=prev,
        mode="automatic",
        elapsed_seconds=1,
    )
    assert est.prefix_identical_tokens == 1200
    assert est.cache_read_tokens == 1152 and est.cache_write_tokens == 0
    short = build(
        ["t", "m"], [500, 10], previous=chain(keys("t")), mode="automatic", elapsed_seconds=1
    )
    assert short.cache_read_tokens == 0


def test_mode_none_reads_nothing():
    est = build(
        ["t"], [5000], previous=chain(keys("t")), mode="none", breakpoints=[0], elapsed_seconds=1
    )
    assert est.cache_read_tokens == 0 and est.prefix_identical_tokens == 5000


def test_bad_arguments():
    with pytest.raises(EngineValidationError):
        build(["t"], [1], mode="magic")
    with pytest.raises(EngineValidationError):
        build(["t"], [1], ttl="2h")
    with pytest.raises(EngineValidationError):
        estimate_cache(block_tokens=[1, 2], current=chain(keys("t")))


# --- prices --------------------------------------------------------------------------------


def test_prices_follow_the_cache_multipliers_when_only_input_is_given():
    prices = Prices.from_table({"input": 3, "output": 15})
    assert (
        prices.cache_write_5m == 3.75
        and prices.cache_write_1h == 6
        and prices.cache_read == pytest.approx(0.3)
    )
    assert Prices.from_table({}) is None and Prices.from_table({"output": 1}) is None
    assert Prices.from_table({"input": 2.5, "cache_read": 1.25}).cache_read == 1.25


def test_cost_of_a_call():
    prices = Prices.from_table({"input": 3, "output": 15})
    cost = cost_usd(
        prices,
        input_tokens=1_000_000,
        cache_write_tokens=1_000_000,
        cache_read_tokens=1_000_000,
        output_tokens=1_000_000,
    )
    assert cost == pytest.approx(3 + 3.75 + 0.3 + 15)
    assert cost_usd(prices, input_tokens=0, cache_write_tokens=1_000_000, ttl="1h") == 6


def test_estimated_cost_with_and_without_the_cache():
    prices = Prices.from_table({"input": 3, "output": 15})
    est = build(
        ["t", "s", "m"],
        [500_000, 400_000, 100_000],
        previous=chain(keys("t", "s")),
        previous_cached=[1],
        breakpoints=[1, 2],
        elapsed_seconds=1,
    )
    costs = estimate_costs(prices, est)
    assert costs["input_cost_usd"] == pytest.approx(0.9 * 0.3 + 0.1 * 3.75)
    assert costs["input_cost_without_cache_usd"] == pytest.approx(3.0)
    assert costs["saved_usd"] > 0
    assert estimate_costs(None, est) == {"priced": False}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-50, max_value=5000), max_size=60))
def test_running_totals_equal_a_running_sum_at_every_block(tokens):
    """The running totals the estimate reads (summed from the nearer end, negative counts as
    0) are the running sum of the clamped counts at every block."""
    running = caching._Running(tokens)
    expected = 0
    for i, count in enumerate(tokens):
        expected += max(0, count)
        assert running[i] == expected
    assert running.total == expected
