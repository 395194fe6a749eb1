"""Response schemas of the compaction API (docs/concepts/compaction.md#snapshots), for OpenAPI and
its clients."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from sessions.schemas_out import ContextOut, Number, Out, SessionOut


class CompactResultOut(Out):
    """docs/concepts/compaction.md#compact-result."""

    before_tokens: int
    after_tokens: int | None
    before_msg_count: int | None
    after_msg_count: int | None
    strategies_run: list[Any]


class CompactOut(Out):
    """202: queued or still running (``wait: false``, or a join); 200: finished (``wait: true``)."""

    run_id: str
    status: str
    joined: bool = Field(..., description="True when an active run was joined")
    result: CompactResultOut | None = None
    changed: bool | None = None
    retention_score: Number | None = None


class PolicyChangeOut(Out):
    actor: str = Field(..., description='who changed it: "operator alice", "agent key ci-bot"')
    after_seq: int = Field(..., description="the session's last message when it changed")
    changes: list[dict[str, Any]] = Field(..., description="[{field, old, new}], leaf by leaf")


class ReasonOut(Out):
    """docs/concepts/compaction.md#reasons: why the run was requested, recorded then, with
    its numbers (tokens of the service's estimate). Which keys are present depends on
    ``kind``; ``used`` = ``fixed`` + ``history`` + ``calibration`` + ``reserved`` + ``extra``."""

    kind: str = Field(
        ...,
        description="threshold, planner, ratio, tool_overflow, preflight (automatic runs);"
        " overflow (emergency); manual; tool; client",
    )
    used: int | None = Field(None, description="the guard's projection of the context")
    threshold: int | None = Field(
        None,
        description="the line ``used`` crossed: compact_at (threshold), the planner's"
        " cheapest-cycle trigger (planner), the fixed ratio's line (ratio), block_at"
        " (preflight), the window (tool_overflow)",
    )
    compact_at: int | None = Field(None, description="the guard's compact line")
    block_at: int | None = Field(None, description="the guard's block line")
    window: int | None = Field(None, description="the effective window")
    tier: str | None = Field(None, description="the guard's status: ok, compact, block, final")
    history: int | None = Field(
        None, description="summary and live messages: what a run's before_tokens counts"
    )
    fixed: int | None = Field(None, description="system prompt, skills and tool descriptions")
    calibration: int | None = Field(
        None, description="what the provider's reported usage counted beyond the estimate"
    )
    reserved: int | None = Field(None, description="reserved for tool outputs not yet posted")
    extra: int | None = Field(None, description="room the call asked for (extra_tokens)")
    check: str | None = Field(
        None, description="the check point that saw it: assistant, tool, usage"
    )
    action: str | None = Field(None, description="planner: compact, or clear (tool outputs)")
    floor: int | None = Field(None, description="planner: the context a compaction leaves")
    per_call: int | None = Field(None, description="planner: tokens a call adds, on average")
    cost: Number | None = Field(None, description="planner: a compaction's cost in cache units")
    expected_calls: Number | None = Field(None, description="planner: calls until the next one")
    clearable: int | None = Field(None, description="planner: what clearing outputs frees")
    ratio: Number | None = Field(None, description="ratio: the fixed trigger's share")
    setting: str | None = Field(
        None, description="ratio: the policy key, threshold_ratio or sandwich_threshold"
    )
    seq: int | None = Field(None, description="tool_overflow: the output's message")
    output_tokens: int | None = Field(None, description="tool_overflow: the output's size")
    kept_tokens: int | None = Field(None, description="tool_overflow: its view once cut")
    view: str | None = Field(None, description="tool_overflow: cut, or trimmed (a placeholder)")
    source: str | None = Field(
        None, description="overflow: api (POST /overflow) or proxy (upstream's answer)"
    )
    reported_tokens: int | None = Field(None, description="overflow: the request's size")
    limit: int | None = Field(None, description="overflow: the maximum upstream named")
    context_window: int | None = Field(None, description="overflow: the session's window")
    previous_context_window: int | None = Field(
        None, description="overflow: the window before the proxy lowered it to ``limit``"
    )
    via: str | None = Field(None, description="manual: api or dashboard")
    key: str | None = Field(None, description="manual via api: the agent key's name")
    key_prefix: str | None = Field(None, description="manual via api: the key's prefix")
    operator: str | None = Field(None, description="manual via dashboard: the operator")
    tool: str | None = Field(None, description="tool: the tool the agent called")
    form: str | None = Field(
        None, description="client: checkpoint, trigger or compact (POST /responses/compact)"
    )
    policy_change: PolicyChangeOut | None = Field(
        None, description="the threshold or compaction settings changed since the last run"
    )


class RunOut(Out):
    """A compaction run; GET /compactions/{run_id} adds the detail keys."""

    run_id: str
    session_id: str
    trigger: str
    reason: ReasonOut | None = Field(
        ..., description="why it was requested; null for runs recorded before reasons were"
    )
    reason_text: str | None = Field(..., description="the reason as one sentence")
    status: str
    strategy: str | None
    chain: list[str] | None
    forced: bool
    changed: bool | None
    result: CompactResultOut | None
    retention_score: Number | None
    summarizer: str | None = Field(
        None,
        description="the summariser that wrote the summary: offline, anthropic, openai, gemini",
    )
    model: str | None = Field(None, description="the model that wrote the summary")
    error: dict[str, Any] | None = Field(..., description="{code, message} of a failed run")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RunDetailOut(RunOut):
    instructions: str | None = None
    retain_last_turns: int | None = None
    before_used: int | None = None
    after_used: int | None = None
    target_tokens: int | None = None
    through_seq: int | None = None
    reports: list[dict[str, Any]] | None = None
    retention: dict[str, Any] | None = None
    attempts: int | None = None
    timings: dict[str, Any] | None = None
    cost: dict[str, Any] | None = Field(
        None,
        description="prompt-cache units: rewritten_tokens, summary_input_tokens,"
        " summary_cached_tokens, summary_output_tokens, units, expected_calls, planner",
    )
    snapshot_id: int | None = None


class RunListOut(Out):
    items: list[RunOut]


class SnapshotOut(Out):
    id: int
    kind: str
    run_id: str | None
    restored_from: int | None
    uncompacted: bool
    window_start_seq: int
    head_end_seq: int = Field(
        0, description="The sandwich's head: its last seq (its messages lead); 0: none"
    )
    through_seq: int
    token_count: int
    message_count: int
    created_at: datetime


class SnapshotFullOut(SnapshotOut):
    retain: str
    summary: str
    messages: list[dict[str, Any]]


class SnapshotListOut(Out):
    items: list[SnapshotOut]


class RestoreOut(Out):
    snapshot: SnapshotOut
    session: SessionOut


class ResumeOut(Out):
    """docs/concepts/compaction.md#resume: the newest snapshot (null: never compacted) and what
    follows it."""

    session_id: str
    snapshot: SnapshotFullOut | None
    later_messages: list[dict[str, Any]]
    retain: str
    summary: str
    messages: list[dict[str, Any]]
    head_end_seq: int = Field(
        0,
        description="The sandwich's head: messages up to this seq, sent before"
        " the summary; 0: the summary comes first",
    )
    last_seq: int


class OverflowOut(ContextOut):
    """The new context after the emergency compression, and the run that made it."""

    compaction: RunOut
