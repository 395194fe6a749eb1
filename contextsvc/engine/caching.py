"""Prompt-cache accounting: what of a built context a provider can read from cache.

A request is seen as a sequence of *blocks* in the provider's cache order —
the tool list, each system section, the retain/summary preamble, each history
message — followed by an uncached tail (status text, notes). Each build keeps
a *chain* of digests, ``h_i = H(h_{i-1} ‖ key_i)``, so two builds share their
first ``k`` blocks exactly when their ``k``-th chain digests are equal, and the
shared prefix is found by binary search over two byte strings.

Three provider models:

- ``breakpoints`` (Anthropic ``cache_control``): entries exist only where the
  previous build put markers (or read from cache); a build reads the longest
  such entry that is still a prefix of it, within the ~20-block look-back of
  one of its own markers, inside the TTL. Tokens from there to its last marker
  are written (1.25× for 5 min, 2× for 1 h), later ones are plain input.
- ``automatic`` (OpenAI): the shared prefix is read in 128-token increments
  once it reaches the 1,024-token minimum; writes are free.
- ``none``: nothing is cached.

Costs come from a per-model price table in USD per million tokens (input,
output, cache writes, cache reads); missing cache prices follow Anthropic's
multipliers (write 1.25× / 2×, read 0.1× of input).
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import EngineValidationError

CACHE_MODES: tuple[str, ...] = ("breakpoints", "automatic", "none")

DIGEST_BYTES = 8
# Anthropic checks for hits "at all previous content block boundaries, up to
# approximately 20 blocks before" each explicit breakpoint.
LOOKBACK_BLOCKS = 20
# OpenAI caches the longest prefix in 128-token increments from 1,024 tokens.
AUTOMATIC_INCREMENT = 128
AUTOMATIC_MIN_TOKENS = 1024
TTL_SECONDS: dict[str, int] = {"5m": 300, "1h": 3600}
WRITE_MULTIPLIER: dict[str, float] = {"5m": 1.25, "1h": 2.0}
READ_MULTIPLIER = 0.1


def block_key(*parts: str | bytes | int | None) -> bytes:
    """A short digest identifying one block's content."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for part in parts:
        if part is None:
            h.update(b"\x00")
        elif isinstance(part, bytes):
            h.update(part)
        else:
            h.update(str(part).encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.digest()


def chain(keys: Sequence[bytes], start: bytes = b"") -> bytes:
    """Chained digests of ``keys``, concatenated (``DIGEST_BYTES`` each).

    ``start``: the chain of blocks that come before ``keys`` (returned first),
    so a build whose leading blocks are a previous build's hashes only the rest.
    """
    out = bytearray(start)
    previous = start[-DIGEST_BYTES:]
    for key in keys:
        previous = hashlib.blake2b(previous + key, digest_size=DIGEST_BYTES).digest()
        out += previous
    return bytes(out)


def common_prefix_blocks(previous: bytes | None, current: bytes) -> int:
    """How many leading blocks two chains share (equality is monotone: binary search)."""
    if not previous:
        return 0
    n = min(len(previous), len(current)) // DIGEST_BYTES
    lo, hi = 0, n  # invariant: the first lo blocks match; answer <= hi

    def same(k: int) -> bool:  # do the first k blocks match?
        start = (k - 1) * DIGEST_BYTES
        return previous[start : start + DIGEST_BYTES] == current[start : start + DIGEST_BYTES]

    while lo < hi:
        mid = (lo + hi + 1) // 2
        if same(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True, slots=True)
class CacheEstimate:
    """What the provider would read, write and bill as input for one build."""

    mode: str
    input_tokens: int  # everything sent: blocks + tail
    blocks: int
    prefix_identical_blocks: int
    prefix_identical_tokens: int  # shared with the previous build, whatever the provider
    cache_read_tokens: int
    cache_write_tokens: int
    uncached_tokens: int
    read_at: int | None  # block index of the entry read
    expired: bool  # the previous build is older than the TTL
    prefix_changed: bool  # the previously sent prefix changed (not merely grew)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "input_tokens": self.input_tokens,
            "blocks": self.blocks,
            "prefix_identical_blocks": self.prefix_identical_blocks,
            "prefix_identical_tokens": self.prefix_identical_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "uncached_input_tokens": self.uncached_tokens,
            "cache_read_ratio": round(self.cache_read_tokens / self.input_tokens, 4)
            if self.input_tokens
            else 0.0,
            "expired": self.expired,
            "prefix_changed": self.prefix_changed,
        }


class _Running:
    """The tokens of blocks ``0..i`` (``running[i]``), negative counts as 0: summed in C
    from the nearer end when asked. A build asks for a few, mostly near the history's
    end, so no list of every running total is made (a Python-level step per block)."""

    __slots__ = ("tokens", "total")

    def __init__(self, tokens: Sequence[int]) -> None:
        # Counts are never negative in practice: then no copy is made.
        self.tokens = tokens if min(tokens, default=0) >= 0 else [max(0, t) for t in tokens]
        self.total = sum(self.tokens)

    def __getitem__(self, i: int) -> int:
        if 2 * i < len(self.tokens):
            return sum(self.tokens[: i + 1])
        return self.total - sum(self.tokens[i + 1 :])


def estimate_cache(
    *,
    block_tokens: Sequence[int],
    current: bytes,
    previous: bytes | None = None,
    previous_cached: Sequence[int] = (),
    breakpoints: Sequence[int] = (),
    tail_tokens: int = 0,
    mode: str = "breakpoints",
    min_cacheable: int = 1024,
    elapsed_seconds: float | None = None,
    ttl: str = "5m",
    lookback: int = LOOKBACK_BLOCKS,
) -> CacheEstimate:
    """Account one build against the previous one.

    ``previous_cached`` are the block indices that hold a cache entry after the
    previous build (its markers and what it read); ``breakpoints`` are this
    build's markers, as block indices (a marker on block ``i`` caches blocks
    ``0..i``). ``elapsed_seconds`` since the previous build decides expiry.
    """
    if mode not in CACHE_MODES:
        raise EngineValidationError(
            f"cache mode must be one of {', '.join(CACHE_MODES)}", field="mode"
        )
    if ttl not in TTL_SECONDS:
        raise EngineValidationError(
            f"cache ttl must be one of {', '.join(TTL_SECONDS)}", field="ttl"
        )
    n = len(block_tokens)
    if len(current) != n * DIGEST_BYTES:
        raise EngineValidationError("one chain digest per block is required", field="current")
    cumulative = _Running(block_tokens)
    total = cumulative.total + max(0, tail_tokens)
    shared = common_prefix_blocks(previous, current)
    shared_tokens = cumulative[shared - 1] if shared else 0
    previous_blocks = len(previous) // DIGEST_BYTES if previous else 0
    changed = previous_blocks > 0 and shared < previous_blocks
    expired = previous is None or elapsed_seconds is None or elapsed_seconds > TTL_SECONDS[ttl]

    read = write = 0
    read_at: int | None = None
    if mode == "breakpoints":
        marks = sorted(b for b in breakpoints if 0 <= b < n)
        if not expired and marks:
            for entry in sorted(set(previous_cached), reverse=True):
                if entry >= shared or entry < 0:
                    continue  # that prefix is no longer identical
                if cumulative[entry] < min_cacheable:
                    continue
                # The nearest marker at or after the entry must look back far enough.
                i = bisect_right(marks, entry - 1)
                if i < len(marks) and marks[i] - entry <= lookback:
                    read_at = entry
                    read = cumulative[entry]
                    break
        if marks:
            write = max(0, cumulative[marks[-1]] - read)
    elif mode == "automatic":
        if not expired and shared_tokens >= AUTOMATIC_MIN_TOKENS:
            read = shared_tokens - shared_tokens % AUTOMATIC_INCREMENT
            read_at = shared - 1
    return CacheEstimate(
        mode=mode,
        input_tokens=total,
        blocks=n,
        prefix_identical_blocks=shared,
        prefix_identical_tokens=shared_tokens,
        cache_read_tokens=read,
        cache_write_tokens=write,
        uncached_tokens=max(0, total - read - write),
        read_at=read_at,
        expired=expired,
        prefix_changed=changed,
    )


def cached_after(estimate: CacheEstimate, breakpoints: Sequence[int]) -> list[int]:
    """Block indices holding a cache entry once this build has been sent."""
    if estimate.mode == "breakpoints":
        entries = set(breakpoints)
        if estimate.read_at is not None:
            entries.add(estimate.read_at)  # a read refreshes the entry's TTL
        return sorted(entries)
    if estimate.mode == "automatic" and estimate.blocks:
        return [estimate.blocks - 1]
    return []


# --- prices -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None) -> Prices | None:
        """From a ModelProfile.prices row; None when the model has no input price."""
        if not table or table.get("input") is None:
            return None
        base = float(table["input"])

        def pick(key: str, default: float) -> float:
            value = table.get(key)
            return float(value) if value is not None else default

        return cls(
            input=base,
            output=pick("output", 0.0),
            cache_write_5m=pick("cache_write_5m", base * WRITE_MULTIPLIER["5m"]),
            cache_write_1h=pick("cache_write_1h", base * WRITE_MULTIPLIER["1h"]),
            cache_read=pick("cache_read", base * READ_MULTIPLIER),
        )

    def write_price(self, ttl: str) -> float:
        return self.cache_write_1h if ttl == "1h" else self.cache_write_5m

    def to_dict(self) -> dict[str, float]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_write_5m": self.cache_write_5m,
            "cache_write_1h": self.cache_write_1h,
            "cache_read": self.cache_read,
        }


def cost_usd(
    prices: Prices,
    *,
    input_tokens: int,
    cache_write_tokens: int = 0,
    cache_read_tokens: int = 0,
    output_tokens: int = 0,
    ttl: str = "5m",
) -> float:
    """Cost of one call; ``input_tokens`` are the uncached ones (Anthropic's usage fields)."""
    total = (
        input_tokens * prices.input
        + cache_write_tokens * prices.write_price(ttl)
        + cache_read_tokens * prices.cache_read
        + output_tokens * prices.output
    )
    return round(total / 1_000_000, 6)


def estimate_costs(
    prices: Prices | None, estimate: CacheEstimate, *, ttl: str = "5m"
) -> dict[str, Any]:
    """Input-side cost of a build with the cache, and without any caching."""
    if prices is None:
        return {"priced": False}
    with_cache = cost_usd(
        prices,
        input_tokens=estimate.uncached_tokens,
        cache_write_tokens=estimate.cache_write_tokens,
        cache_read_tokens=estimate.cache_read_tokens,
        ttl=ttl,
    )
    without = cost_usd(prices, input_tokens=estimate.input_tokens)
    return {
        "priced": True,
        "input_cost_usd": with_cache,
        "input_cost_without_cache_usd": without,
        "saved_usd": round(without - with_cache, 6),
    }
