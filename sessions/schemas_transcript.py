"""Schemas of the transcript read-back: ``GET /sessions/{sid}/messages`` and the export.

The answers are rendered by ``selectors_transcript`` (one serializer for the
pages and the export's lines); these models state that shape for OpenAPI and
its clients, and the contract tests hold the answers to them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Schema
from pydantic import Field

from .schemas_out import Out

MAX_PAGE = 1_000
# What ``api_transcript.encode_cursor`` writes (empty: no cursor, from the first message).
CURSOR_PATTERN = r"^(s[0-9a-z]{1,6})?$"


class TranscriptQuery(Schema):
    cursor: str | None = Field(
        None,
        pattern=CURSOR_PATTERN,
        description="Where the previous page ended (its next_cursor, opaque); "
        "none: from the first message",
    )
    limit: int = Field(100, ge=1, le=MAX_PAGE, description="Messages per page")


class ExportQuery(Schema):
    format: Literal["anthropic", "openai", "gemini"] | None = Field(
        None,
        description="None: one transcript message per line, as GET /messages lists them. "
        "anthropic / openai / gemini: one native message per line (Messages API, Chat "
        "Completions, Gemini contents), retracted messages left out",
    )


class TranscriptToolCallOut(Out):
    id: str
    name: str
    arguments: dict[str, Any] = Field(..., description="As posted (tool clearing keeps them)")


class TranscriptMessageOut(Out):
    seq: int
    role: Literal["user", "assistant", "tool", "system"]
    state: Literal["live", "head", "compacted", "retracted"] = Field(
        ...,
        description="live: in the live window; head: the conversation's start a sandwich "
        "compaction kept live; compacted: before the live window (summarised away, kept "
        "here); retracted: taken out by the agent",
    )
    pinned: bool = Field(..., description="Posted with pinned: kept verbatim by compaction")
    client_compaction_marker: bool = Field(
        ...,
        description="The marker the proxy wrote where the client compacted or edited its own "
        "history; the live window restarted after it",
    )
    created_at: datetime
    retracted_at: datetime | None
    token_count: int = Field(..., description="Tokens of what the model is shown (the view)")
    token_count_estimated: bool
    content: str | list[dict[str, Any]] = Field(
        ...,
        description="As posted: text or parts; empty when content_in_output "
        "(the text lives in the stored output output_ref)",
    )
    content_in_output: bool = Field(
        ...,
        description="The text is the stored output alone: read it with GET /refs/{output_ref} "
        "or /refs/{output_ref}/raw; view is what the model is shown",
    )
    output_ref: str | None
    view: str | None = Field(
        ..., description="What the model is shown when it differs from content (cut, trimmed)"
    )
    view_state: str = Field(..., description="full, cut, trimmed, offloaded, cleared or failed")
    tool_calls: list[TranscriptToolCallOut]
    tool_call_id: str | None
    name: str | None
    reasoning: str | None


class TranscriptPageOut(Out):
    items: list[TranscriptMessageOut] = Field(..., description="In seq order")
    next_cursor: str | None = Field(..., description="The next page's cursor; null at the end")
