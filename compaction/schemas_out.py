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


class RunOut(Out):
    """A compaction run; GET /compactions/{run_id} adds the detail keys."""

    run_id: str
    session_id: str
    trigger: str
    status: str
    strategy: str | None
    chain: list[str] | None
    forced: bool
    changed: bool | None
    result: CompactResultOut | None
    retention_score: Number | None
    summarizer: str | None = Field(
        None, description="the summariser that wrote the summary: offline, anthropic, openai"
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
