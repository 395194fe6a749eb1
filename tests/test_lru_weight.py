"""BoundedLRU bounded by weight: the context window cache holds at most so many messages."""

from __future__ import annotations

import pytest

from contextsvc.lru import BoundedLRU


def test_entries_go_oldest_first_while_the_weight_is_over():
    cache: BoundedLRU[str, list[int]] = BoundedLRU(100, max_weight=10, weigh=len)
    cache.put("a", [1] * 4)
    cache.put("b", [1] * 4)
    cache.get("a")  # now the most recently used
    cache.put("c", [1] * 4)
    assert "b" not in cache and "a" in cache and "c" in cache


def test_the_newest_entry_stays_even_when_it_alone_is_over():
    cache: BoundedLRU[str, list[int]] = BoundedLRU(100, max_weight=3, weigh=len)
    cache.put("a", [1])
    cache.put("big", [1] * 10)
    assert len(cache) == 1 and cache.get("big") == [1] * 10


def test_replacing_an_entry_counts_its_new_weight_only():
    cache: BoundedLRU[str, list[int]] = BoundedLRU(100, max_weight=10, weigh=len)
    cache.put("a", [1] * 6)
    cache.put("a", [1] * 2)
    cache.put("b", [1] * 8)
    assert "a" in cache and "b" in cache
    cache.pop("b")
    cache.put("c", [1] * 8)
    assert "a" in cache and "c" in cache
    cache.clear()
    cache.put("d", [1] * 10)
    assert len(cache) == 1


def test_weight_needs_a_limit():
    with pytest.raises(ValueError):
        BoundedLRU(10, weigh=len)
