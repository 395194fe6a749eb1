"""The cost-aware compaction planner: when a compaction pays for itself, and what it costs.

Pure arithmetic on token counts; the services feed it a session's numbers.

The cost model is the provider's prompt cache (Anthropic's multipliers): every
call re-reads its cached prefix at ``READ`` per token, writes what follows the
first changed message at ``WRITE``, and a summary call reads its input at
``INPUT`` (``READ`` when it is the cached prefix) and writes at ``OUTPUT``.

A session's context grows by about ``per_call`` tokens per LLM call, from the
floor a compaction leaves (``floor``: what is not compactable plus what the
compaction keeps and the summary it writes) up to the trigger ``T``, where a
compaction costing ``X`` brings it back to the floor. Per appended token, the
reads of that sawtooth cost ``READ · (T + floor) / (2 · per_call)`` and the
compaction ``X / (T − floor)``; the sum is smallest at

    T − floor = sqrt(2 · X · per_call / READ)

so a compaction is due once the context has grown that much past the floor
(never past the guard's own compaction threshold, never before the context is
worth compacting). Compacting earlier wastes the compaction; later, the reads
of a bloated prefix on every call. The same model prices a trim or a clear of
old tool outputs (a prefix break without a summary): cheap on its own, but
each one re-writes everything after it, so they are batched with compactions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

READ = 0.1  # a cached prefix token, read again
WRITE = 1.25  # a token written to the cache (new, or after a changed message)
INPUT = 1.0  # an uncached input token of a summary call
OUTPUT = 5.0  # an output token (the summary)
# A clear frees at least this share of the window: smaller ones come back within
# a few calls and the next compaction re-writes the prefix anyway.
MIN_CLEAR_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class PlannerInput:
    """A session's numbers, in tokens of the service's estimate."""

    used: int  # the context now (the projection)
    limit: int  # the effective window
    fixed: int  # system, skills, tool descriptions: never compacted, always cached
    floor: int  # the context right after a compaction (fixed included)
    per_call: float  # tokens a call adds, on average
    summary_tokens: int  # what a summary writes, at most
    ceiling: int  # the guard's compaction threshold: compact here whatever the cost
    cached_summary: bool = True  # the summary call re-reads the cached prefix
    clearable: int = 0  # what clearing the old tool outputs alone would free


@dataclass(frozen=True, slots=True)
class PlanDecision:
    """Compact now, clear old tool outputs now, or leave the prefix alone, with the
    figures that decided it."""

    compact: bool
    trigger: int  # the context size at which a compaction pays for itself
    cost: float  # units a compaction now costs (summary call + re-written kept part)
    expected_calls: float  # calls until the next compaction, after this one
    reason: str
    action: str = "leave"  # "compact", "clear" or "leave"


def compaction_cost(
    *, summary_input: int, summary_tokens: int, rewritten: int, cached_summary: bool
) -> float:
    """Cost units of one compaction: the summary call and the prefix it re-writes."""
    rate = READ if cached_summary else INPUT
    return rate * summary_input + OUTPUT * summary_tokens + WRITE * rewritten


def optimal_growth(cost: float, per_call: float) -> float:
    """How far past the floor the context should grow before the next compaction."""
    return math.sqrt(2 * max(cost, 0.0) * max(per_call, 1.0) / READ)


def decide(p: PlannerInput) -> PlanDecision:
    """Compact now when the context reached the trigger that minimises cost per call."""
    rewritten = max(0, p.floor - p.fixed)
    cost = compaction_cost(
        summary_input=max(0, p.used - p.fixed),
        summary_tokens=p.summary_tokens,
        rewritten=rewritten,
        cached_summary=p.cached_summary,
    )
    growth = optimal_growth(cost, p.per_call)
    trigger = min(p.ceiling, math.ceil(p.floor + growth))
    expected = max(0.0, (trigger - p.floor) / max(p.per_call, 1.0))
    if p.used >= p.ceiling:
        reason = "at the guard's compaction threshold"
        return PlanDecision(True, trigger, cost, expected, reason, "compact")
    if p.used >= trigger:
        reason = "the context outgrew the cheapest cycle"
        return PlanDecision(True, trigger, cost, expected, reason, "compact")
    clear = clear_decision(p, trigger)
    if clear is not None:
        return clear
    return PlanDecision(False, trigger, cost, expected, "a compaction would not pay for itself yet")


def clear_decision(p: PlannerInput, trigger: int) -> PlanDecision | None:
    """Clearing old tool outputs alone (no summary call) when the reads it saves until
    the next compaction would be due pay for the prefix it re-writes."""
    if p.clearable <= 0:
        return None
    after = p.used - p.clearable
    cost = WRITE * max(0, after - p.fixed)
    calls = max(0.0, (trigger - after) / max(p.per_call, 1.0))
    # The same sawtooth as a compaction's, with the clear's cost: due once the
    # outputs it would free have grown that much, and only if it saves more in
    # reads before the next compaction than it re-writes.
    if p.clearable < max(optimal_growth(cost, p.per_call), MIN_CLEAR_SHARE * p.limit):
        return None
    if READ * p.clearable * calls <= cost:
        return None
    return PlanDecision(
        True, trigger, cost, calls, "clearing old tool outputs pays for itself", "clear"
    )
