"""The built-in tool ``history_search``: recall over everything the session ever held.

Registered in ``sessions.extensions.REGISTRY`` like the output cache tools:
``POST /sessions/{sid}/tools/history_search/call`` on REST, and run inside
the proxy when a model calls it. It first brings the session's index up to
date (``index.recall_catch_up``), then searches it (``search.recall_search``).
"""

from __future__ import annotations

from typing import Any

from ninja import Schema
from pydantic import ConfigDict, Field

from contextsvc.engine.messages import ToolDef
from contextsvc.engine.recall import SEARCH_TOOL_NAME

from ..models import Session
from ..outputs.tools import parse_arguments
from ..schemas_base import MAX_SEQ
from .index import recall_catch_up
from .search import RecallQuery, recall_search

MAX_HITS = 50


class SearchArgs(Schema):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(..., min_length=1, max_length=1000)
    regex: bool = False
    ignore_case: bool = True
    tool_name: str | None = Field(None, max_length=200)
    seq_from: int | None = Field(None, ge=1, le=MAX_SEQ)
    seq_to: int | None = Field(None, ge=1, le=MAX_SEQ)
    # 0: the default, as for the other built-ins (models send 0 for "no limit").
    limit: int = Field(20, ge=0, le=MAX_HITS)
    cursor: str | None = Field(None, max_length=100)


def call_search(session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
    args = parse_arguments(SearchArgs, arguments)
    progress = recall_catch_up(session.pk)
    return recall_search(
        session,
        RecallQuery(
            query=args.query,
            regex=args.regex,
            ignore_case=args.ignore_case,
            tool_name=args.tool_name,
            seq_from=args.seq_from,
            seq_to=args.seq_to,
            limit=args.limit or 20,
            cursor=args.cursor,
        ),
        indexed_seq=progress.indexed_seq,
    )


SEARCH_TOOL = ToolDef(
    name=SEARCH_TOOL_NAME,
    description=(
        "Search everything earlier in this session: every tool output in full (also those "
        "trimmed or summarised away), every earlier message and tool call, every summary. "
        "Text (case-insensitive) or a regex; hits newest first with seq, tool, ref, line. "
        "Read around a hit with tool_output_cache(ref_id, offset=line); pass next_cursor as "
        "cursor for older hits."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Text to find (3+ characters)",
            },
            "regex": {
                "type": "boolean",
                "description": "query is a regular expression (Python syntax)",
            },
            "ignore_case": {"type": "boolean", "description": "Case-insensitive (default true)"},
            "tool_name": {
                "type": "string",
                "description": "Only this tool's outputs and calls",
            },
            "seq_from": {"type": "integer", "minimum": 1, "description": "Oldest seq to search"},
            "seq_to": {"type": "integer", "minimum": 1, "description": "Newest seq to search"},
            "limit": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_HITS,
                "description": "Hits per page (default 20)",
            },
            "cursor": {"type": "string", "description": "next_cursor of the previous page"},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    category="builtin",
)
