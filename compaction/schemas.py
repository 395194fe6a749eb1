"""API schemas for compaction. Inputs forbid unknown fields."""

from __future__ import annotations

from ninja import Schema
from pydantic import ConfigDict, Field

from sessions.schemas import MAX_TOKENS
from sessions.schemas_policy import StrategyChoice

# The engine's strategy names and "chain" (one list: the policy's).
StrategyName = StrategyChoice


class In(Schema):
    model_config = ConfigDict(extra="forbid")


class CompactIn(In):
    strategy: StrategyName | None = None
    # Appended to the summary prompt (docs/concepts/compaction.md#directives style: a directive).
    instructions: str = Field("", max_length=20_000)
    retain_last_turns: int | None = Field(None, ge=0, le=10_000)
    # True: run now, in the request, and answer with the result (200).
    wait: bool = False


class OverflowIn(In):
    # What the provider said (kept in the run's log), and what it counted.
    detail: str = Field("", max_length=10_000)
    reported_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
