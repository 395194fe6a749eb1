"""API schemas of a session's policy (``policy`` of a session create / patch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.strategies.chain import STRATEGY_NAMES, validate_chain
from contextsvc.engine.summarize import SUMMARIZERS

from .schemas_base import (
    MAX_LIST_ITEMS,
    MAX_PROMPT_CHARS,
    MAX_TOKENS,
    MAX_TURNS,
    NOT_NEGATIVE,
    POSITIVE,
    TOOL_NAME_PATTERN,
    In,
    in_value_branch,
)

# The engine's own names (so the two cannot drift apart), as a Literal so the
# policy page offers them in a select.
StrategyChoice = Literal[("chain", *STRATEGY_NAMES)]  # type: ignore[valid-type]


class CompactionPolicy(In):
    enabled: bool = True
    auto: bool = True
    threshold_ratio: float | None = Field(None, gt=0, le=1)
    # Where a compaction brings the history down to: a share of the room left in
    # the effective window after the fixed part (system, skills, tool schemas).
    target_ratio: float | None = Field(None, ge=0.05, le=0.95)
    # "cost": compact when it pays for itself (engine.planner); "threshold": at the guard's tier.
    planner: Literal["cost", "threshold"] | None = None
    # The planner may also clear old tool outputs alone between compactions.
    planner_clear: bool = False
    summary_max_tokens: int | None = Field(None, ge=64, le=MAX_TOKENS)
    # The first user message stays verbatim above the summary (in the cached prefix).
    pin_task: bool = True
    # The summary call re-reads the session's cached context (engine.summary_prefix).
    summary_reuse_cache: bool = True
    # A later compaction summarises only what left the window since the last one
    # and merges with the earlier memory (False: it re-summarises that memory too).
    incremental_summary: bool = True
    # sliding_window: how many of the newest messages stay.
    keep_last_n: int = Field(20, ge=1, le=MAX_TURNS)
    # tree: messages per leaf summary, and the levels of summaries above them.
    chunk_size: int = Field(20, ge=2, le=MAX_TURNS)
    levels: int = Field(3, ge=1, le=8)
    # What is sent to the summariser at most (None: the effective window minus the summary).
    summary_input_max_tokens: int | None = Field(None, ge=1_000, le=MAX_TOKENS)
    model: str | None = Field(None, min_length=1, max_length=200)
    # Who writes this session's summaries (CONTEXTSVC_SUMMARIZER when unset).
    # The validators below name the field in their message; the enums document the same lists.
    summarizer: str | None = Field(
        None, max_length=50, json_schema_extra=in_value_branch(enum=list(SUMMARIZERS))
    )
    strategy: StrategyChoice | None = None
    chain: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_LIST_ITEMS,
        json_schema_extra=in_value_branch(items={"type": "string", "enum": list(STRATEGY_NAMES)}),
    )
    summary_prompt: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    summary_directives: list[str] = Field([], max_length=MAX_LIST_ITEMS)
    retain_prompt: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    retain_directives: list[str] = Field([], max_length=MAX_LIST_ITEMS)
    retain_last_turns: int = Field(1, ge=0, le=MAX_TURNS)
    compression_prompt: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    preserve_top: int = Field(5, ge=0, le=MAX_TURNS)
    preserve_bottom: int = Field(5, ge=0, le=MAX_TURNS)
    sandwich_threshold: float = Field(0.7, gt=0, le=1)
    # docs/concepts/compaction.md#sandwich: the smallest middle worth compressing, the summary's
    # sections, and where the summary goes (auto: system for the sandwich, else user).
    sandwich_min_middle: int = Field(1, ge=1, le=MAX_TURNS)
    sandwich_sections: bool = True
    summary_role: Literal["auto", "user", "system"] = "auto"
    keep_tool_uses: int = Field(3, ge=0, le=MAX_TURNS)
    exclude_tools: list[str] = Field([], max_length=1000)
    clear_at_least: int = Field(0, ge=0, le=MAX_TOKENS)
    clear_tool_inputs: bool = False
    # docs/concepts/compaction.md#tool-clearing / Anthropic clear_tool_uses: the size below which a
    # result stays, the "clear the oldest half" alternative, the adaptive keep count.
    clear_min_bytes: int = Field(1024, ge=0, le=MAX_TOKENS)
    clear_mode: Literal["keep_recent", "oldest_half"] = "keep_recent"
    adaptive_keep: bool = False
    error_keep_factor: int = Field(2, ge=1, le=100)
    dense_tool_uses: int = Field(8, ge=1, le=MAX_TURNS)

    @field_validator("summary_directives", "retain_directives", "exclude_tools")
    @classmethod
    def _short_items(cls, value: list[str]) -> list[str]:
        for i, item in enumerate(value):
            if len(item) > MAX_PROMPT_CHARS:
                raise ValueError(f"item {i} is longer than {MAX_PROMPT_CHARS} characters")
        return value

    @field_validator("summarizer")
    @classmethod
    def _known_summarizer(cls, value: str | None) -> str | None:
        if value is not None and value not in SUMMARIZERS:
            raise ValueError(
                f"unknown summarizer {value!r}; expected one of {', '.join(SUMMARIZERS)}"
            )
        return value

    @field_validator("chain")
    @classmethod
    def _known_chain(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            _check_chain(value)
        return value


def _check_chain(names: list[str]) -> None:
    try:
        validate_chain(names)  # the engine's own list, so the two cannot drift apart
    except EngineValidationError as exc:
        raise ValueError(exc.message) from None


class ToolOutputCachePolicy(In):
    enabled: bool = True
    preset: Literal["default", "offload", "tool_response"] | None = None
    context_budget_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS)
    max_message_bytes: int = Field(50 * 1024, gt=0, le=16 * 1024 * 1024)
    max_line_length: int = Field(2000, gt=0, le=1_000_000)
    trim_hysteresis: float = Field(0.25, ge=0, lt=1)
    # false: no total-budget trim (docs/concepts/trimming.md#budget-trim); per-message cuts stay.
    budget_trim: bool = True
    # An output's view at insertion: at most this share of the effective window
    # (its head and tail, the rest by ref). Unset: engine.output_views.DEFAULT_VIEW_SHARE.
    view_share: float | None = Field(None, gt=0, le=1)


class ThresholdsPolicy(In):
    compact_at: float = Field(0.95, gt=0, le=1)
    block_at: float = Field(0.98, gt=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> ThresholdsPolicy:
        if not self.compact_at < self.block_at:
            raise ValueError("thresholds.compact_at must be below thresholds.block_at")
        return self


class EstimatePolicy(In):
    # Multipliers of every message / image / tool schema: kept small so that
    # a 32 MiB body's count still fits the integer token columns.
    per_message_overhead: int = Field(4, ge=0, le=1_000)
    media_item_tokens: int = Field(1600, ge=0, le=100_000)
    tool_schema_scale: float = Field(2.09, gt=0, le=10)


class PromptCachePolicy(In):
    """Prompt caching (docs/concepts/caching.md#breakpoints): where ``cache_control`` markers go."""

    enabled: bool = True
    # Anthropic cache lifetimes: writes cost 1.25× input for 5 min, 2× for 1 h.
    ttl: Literal["5m", "1h"] = "5m"
    # The moving breakpoint on the newest history block.
    history_breakpoint: bool = True
    mark_tools: bool = True
    max_breakpoints: int = Field(4, ge=1, le=4)
    # Overrides the model profile's minimum cacheable prefix.
    min_cacheable_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    # docs/concepts/caching.md#cacheable-first: within a kind, cacheable sections before the others;
    # false keeps the agent's order within a kind.
    cacheable_first: bool = True


class TargetIn(In):
    provider: str = Field(..., min_length=1, max_length=50)
    model: str = Field(..., min_length=1, max_length=200)
    context_window: int | None = Field(None, le=MAX_TOKENS, json_schema_extra=POSITIVE)
    max_output_tokens: int | None = Field(None, le=MAX_TOKENS, json_schema_extra=NOT_NEGATIVE)
    buffer_tokens: int | None = Field(None, le=MAX_TOKENS, json_schema_extra=NOT_NEGATIVE)


class ProxyPolicy(In):
    """The drop-in proxy (``proxy/``): whether it runs the built-in tools for the model itself."""

    builtin_tools: bool = True
    # Rounds of built-in calls the proxy answers itself for one client call; the
    # last is sent without the built-ins, so the model answers or calls the client's tools.
    max_builtin_rounds: int = Field(8, ge=1, le=32)
    # The client defers its own tools (a tool-search tool, ``defer_loading``):
    # the service's deferral stays off. The proxy sets it when it sees one.
    client_tool_search: bool | None = None


class ReasoningPolicy(In):
    """Reasoning sent back: the current turn's always, as providers require."""

    # Turns whose thinking blocks go back, the current one included (Anthropic's
    # clear_thinking "keep thinking_turns"); null: every turn's.
    keep_thinking_turns: int | None = Field(None, ge=1, le=MAX_TURNS)


class PolicyIn(In):
    compaction: CompactionPolicy | None = None
    tool_output_cache: ToolOutputCachePolicy | None = None
    thresholds: ThresholdsPolicy | None = None
    estimate: EstimatePolicy | None = None
    # Further provider targets the agent may fall back to (docs/concepts/guard.md#targets).
    targets: list[TargetIn] | None = Field(None, max_length=MAX_LIST_ITEMS)
    final_report_tool: str | None = Field(None, pattern=TOOL_NAME_PATTERN)
    # docs/concepts/guard.md#report-tools: the task-status tool, left out of the schema tokens with
    # the final-report tool unless count_report_tools.
    task_status_tool: str | None = Field(None, pattern=TOOL_NAME_PATTERN)
    count_report_tools: bool | None = None
    # docs/concepts/guard.md#sticky-refusal: once an output is refused (toolBudgetExceeded), every
    # later one is too. Default false: each output is judged on its own size.
    tool_budget_sticky: bool | None = None
    tool_deferral_threshold: float | None = Field(None, gt=0, le=1)
    # docs/concepts/deferral.md#available-tools: "list" (the deferred tools under "## Available
    # Tools", each with its first sentence) or "count" (the one-line note alone).
    tool_deferral_note: Literal["list", "count"] | None = None
    prompt_cache: PromptCachePolicy | None = None
    proxy: ProxyPolicy | None = None
    reasoning: ReasoningPolicy | None = None
