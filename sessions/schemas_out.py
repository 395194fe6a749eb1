"""Response schemas of the sessions API: what each operation answers, for OpenAPI and its clients.

Open models (``extra="allow"``): a block another app adds to a budget is
still passed through, and the API's JSON shapes stay what they were.
Handlers that may leave a key out use ``exclude_unset`` so nothing is added.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# An int where the engine counts, a float where it divides: kept as produced.
Number = int | float


class Out(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- the budget (docs/concepts/guard.md#tool-budget) ----------------------------------------------


class GuardOut(Out):
    status: str = Field(..., description="ok, compact, block or final")
    projected: int
    limit: int
    compact_at: int
    block_at: int
    schema_only_overflow: bool
    reason: str | None
    targets: list[dict[str, Any]] = Field(..., description="One verdict per provider target")


class BudgetOut(Out):
    context_window: int
    max_output_tokens: int
    buffer_tokens: int
    effective_window: int
    components: dict[str, int] = Field(
        ...,
        description="Tokens per part: system_prompt, skill_prompts, tool_descriptions, "
        "summary, conversation",
    )
    used: int
    remaining: int
    used_pct: Number
    thresholds: dict[str, Number] = Field(
        ..., description="compact_at, block_at (tokens); compact_ratio, block_ratio"
    )
    history_budget: int
    guard: GuardOut
    estimated_tokens: int
    calibrated_tokens: int | None
    reserved_tokens: int
    tool_budget_exceeded: bool
    can_execute_tool: bool
    tool_outputs: dict[str, Any]


class AppBlocksOut(BudgetOut):
    """The budget with the blocks other apps add (prompt cache, deferral, compaction)."""

    cache: dict[str, Any] | None = None
    deferral: dict[str, Any] | None = None
    degraded: list[Any] | None = None
    compaction: dict[str, Any] | None = None


class UsageReportOut(Out):
    through_seq: int | None
    estimated_tokens: int
    reported_total_tokens: int
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    difference: int
    created_at: datetime


class BudgetDetailOut(AppBlocksOut):
    """GET budget: the budget, the session's status and the usage reports."""

    status: Literal["active", "final"]
    final_reason: str | None
    usage_reports: list[UsageReportOut]


# --- sessions -----------------------------------------------------------------------


class SessionOut(Out):
    id: str
    agent: str
    model: str
    provider: str | None
    status: Literal["active", "final"]
    final_reason: str | None
    context_window: int | None
    max_output_tokens: int | None
    buffer_tokens: int | None
    tokenizer: str | None
    policy: dict[str, Any] = Field(..., description="The policy as set (only the keys given)")
    message_count: int
    live_message_count: int
    last_seq: int
    window_start_seq: int
    head_end_seq: int = Field(
        0,
        description="The sandwich's head: seqs up to this one (the conversation's start) stay live"
        " before the summary; 0: no head",
    )
    created_at: datetime
    updated_at: datetime
    budget: BudgetOut


class SessionListOut(Out):
    items: list[SessionOut]
    next_cursor: int | None


class SectionOut(Out):
    name: str
    content: str
    cacheable: bool
    kind: str


class SectionsOut(Out):
    sections: list[SectionOut]
    budget: BudgetOut


class ToolNamesOut(Out):
    tools: list[str]
    budget: BudgetOut


class OutputRefOut(Out):
    """docs/concepts/trimming.md#output-ref: where a tool output is stored in full."""

    id: str
    byte_size: int
    line_count: int


class AppendedOut(Out):
    seq: int
    role: Literal["user", "assistant", "tool", "system"]
    token_count: int
    token_count_estimated: bool = Field(
        False,
        description="token_count is a bounded estimate (a text past the request's exact-count"
        " budget, CONTEXTSVC_EXACT_TOKEN_CHARS); a background task replaces it with the exact"
        " count, in the message and the session's budget",
    )
    output_ref: str | None
    view: str | None
    ref: OutputRefOut | None = Field(..., description="Set when a tool output was stored")


class AppendOut(Out):
    session_id: str
    messages: list[AppendedOut]
    trimmed_seqs: list[int]
    budget: BudgetOut


class DeletedOut(Out):
    id: str
    deleted: bool


class RetractedOut(Out):
    seq: int
    role: Literal["user", "assistant", "tool", "system"]
    token_count: int


class RetractOut(Out):
    session_id: str
    retracted: list[RetractedOut] = Field(
        ..., description="The messages taken out of the live window now (empty on a repeat)"
    )
    live_message_count: int
    budget: BudgetOut


class UsageOut(Out):
    total_tokens: int
    estimated_tokens: int
    through_seq: int | None
    budget: BudgetOut


class ContextOut(Out):
    """The provider request body (format anthropic, openai, responses or raw) plus the budget.

    ``system``, ``tools`` and the raw format's extra keys are present as the
    format has them; ``messages`` items are in the format's own shape. The
    ``responses`` format has ``instructions``, ``input`` (Responses input
    items) and ``max_output_tokens`` instead of ``system``, ``messages`` and
    ``max_tokens``.
    """

    model: str
    max_tokens: int | None = None
    max_output_tokens: int | None = None
    system: Any = None
    instructions: str | None = None
    messages: list[dict[str, Any]] | None = None
    input: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    budget: AppBlocksOut


class BuiltinToolsOut(Out):
    anthropic: list[dict[str, Any]]
    openai: list[dict[str, Any]]
    gemini: list[dict[str, Any]] = Field(..., description="``functionDeclarations`` entries")


class BuiltinToolResultOut(Out):
    """What a built-in tool answers; each tool has its own keys (the tool's JSON, as is).

    - ``tool_output_cache`` (docs/concepts/trimming.md#reading-refs): numbered lines of a stored
      output, as GET /refs/{ref} answers (``text``, ``offset``, ``limit``, ``lines``,
      ``total_lines``, ``has_more``, ``next_offset``, ``truncated``, ...), with
      ``ref_id`` for ``ref``.
    - ``tool_output_cache_grep``: matching lines with context, as GET
      /refs/{ref}/grep answers, with ``ref_id`` for ``ref``.
    - ``tool_search`` (docs/concepts/deferral.md#tool-search): ``query``, ``matches``, ``loaded``
      (tools now sent for the rest of the turn), ``deferred_remaining``, ``message``.
    - ``compact_context`` (docs/concepts/compaction.md#forced-runs): ``result`` (for the model),
      ``run_id``, ``status``, ``compact_result``.

    No declared fields: the tool's keys are passed through in its own order.
    """


# --- tool outputs (docs/concepts/trimming.md#reading-refs, docs/concepts/guard.md#tool-budget) ----


class OutputOut(Out):
    id: str
    byte_size: int
    line_count: int
    ref: str
    tool_name: str | None
    sha256: str | None
    source: str
    created_at: datetime
    deduplicated: bool


class OutputListOut(Out):
    items: list[OutputOut]
    next_cursor: int | None


class SliceOut(Out):
    ref: str
    tool_name: str | None
    offset: int
    limit: int
    lines: int
    total_lines: int
    byte_size: int
    has_more: bool
    next_offset: int | None
    truncated: bool
    cut_lines: list[int]
    char_offset: int = Field(0, description="Where the first line starts (0-based character)")
    continue_line: dict[str, int] | None = Field(
        None,
        description="When the last line shown is cut: {offset, char_offset} reads on inside it",
    )
    text: str
    message: str | None = Field(None, description="Set when the answer was capped: how to go on")


class GrepLineOut(Out):
    line: int
    text: str


class GrepMatchOut(GrepLineOut):
    before: list[GrepLineOut]
    after: list[GrepLineOut]


class GrepOut(Out):
    ref: str
    pattern: str
    ignore_case: bool
    context: int
    matches: list[GrepMatchOut]
    match_count: int
    truncated: bool
    searched_lines: int
    total_lines: int
    text: str
    # Set when the answer was capped by its size: where to go on.
    has_more: bool | None = None
    next_offset: int | None = None
    start_line: int | None = None
    message: str | None = None


class ToolCostOut(Out):
    tokens: int
    raw_tokens: int
    bytes: int
    reserved_tokens: int
    can_execute: bool
    tool_budget_exceeded: bool


class PreviewOut(ToolCostOut):
    fits: bool
    projected: int
    limit: int


class ReserveOut(ToolCostOut):
    ok: bool
    reason: str | None
    tool_call_id: str | None
    reservation: str | None
    budget: BudgetOut


class ReleaseOut(Out):
    released_tokens: int
    reserved_tokens: int
    can_execute: bool
    budget: BudgetOut


# --- context-build records (GET /sessions/{sid}/calls) ----------------------------------


class ContextCallOut(Out):
    """One context build, as sent, completed by the usage report that followed it."""

    id: int
    source: str = Field(..., description="api (GET /context) or proxy")
    format: str
    model: str
    created_at: datetime
    first_seq: int
    through_seq: int
    message_count: int
    guard_status: str
    effective_window: int
    compact_at: int
    estimated_input: int = Field(..., description="'used' at build time (our estimate)")
    components: dict[str, int]
    breakdown: dict[str, Any] = Field(
        ..., description="sections, tools (sent / deferred, per server), largest, placeholders"
    )
    breakpoints: list[dict[str, Any]] = Field(..., description="[{label, prefix_tokens}]")
    cache_read_estimated: int
    cache_write_estimated: int
    build_ms: float
    completed_at: datetime | None
    reported_input: int | None = Field(..., description="uncached input, as reported")
    reported_total_input: int | None = Field(..., description="input + cache reads + writes")
    reported_output: int | None
    cache_read: int | None
    cache_write: int | None
    cost_usd: float | None = Field(..., description="null when the model has no price")
    cost_basis: Literal["reported", "estimated"] = Field(
        ...,
        description="reported: priced from the provider's usage; estimated: our estimate of "
        "the input, until a usage report completes the call",
    )
    cost_without_cache_usd: float | None
    saved_usd: float | None
    latency_ms: float | None = Field(..., description="from the build to the usage report")
    upstream_status: int | None = Field(..., description="proxy: upstream's HTTP status")
    client_status: int | None = Field(..., description="proxy: the status the client got")
    error_type: str = Field(..., description="proxy: the provider's error type ('' if none)")
    error_message: str
    retries: int = Field(..., description="upstream asked again for this call (an overflow)")
    stream_cut: bool = Field(..., description="the stream ended without its final event")
    stream_events: int | None = Field(..., description="events a stream relayed")
    ttfb_ms: float | None = Field(..., description="from sending upstream to its first byte")
    total_ms: float | None
    failed: bool = Field(..., description="the model call did not complete")


class ContextCallListOut(Out):
    items: list[ContextCallOut]
    next_cursor: int | None
