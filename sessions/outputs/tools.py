"""The built-in tools ``tool_output_cache`` and ``tool_output_cache_grep``
(docs/concepts/trimming.md#reading-refs).

Their definitions and handlers, registered in ``sessions.extensions.REGISTRY``
by ``AgentSessionsConfig.ready()``. A ref is looked up through the session's
owner, so another key's ref is not found.
"""

from __future__ import annotations

from typing import Any

from ninja import Schema
from pydantic import ConfigDict, Field, ValidationError

from contextsvc.engine.messages import ToolDef
from contextsvc.errors import ValidationFailed

from ..models import Session
from ..schemas_base import MAX_SEQ
from .budget import cache_config
from .pages import MAX_GREP_CONTEXT, MAX_GREP_MATCHES, MAX_SLICE_LINES, grep_page, read_page
from .store import output_get

# Lines ``tool_output_cache`` reads when the model names no limit (or 0).
DEFAULT_READ_LINES = 200


class CacheReadArgs(Schema):
    model_config = ConfigDict(extra="forbid")

    ref_id: str = Field(..., min_length=1, max_length=64)
    offset: int = Field(1, ge=0, le=MAX_SEQ)
    # 0: the default, not an error (models send 0 for "no limit in particular").
    limit: int = Field(DEFAULT_READ_LINES, ge=0, le=MAX_SLICE_LINES)
    char_offset: int = Field(0, ge=0, le=2**40)


class CacheGrepArgs(Schema):
    model_config = ConfigDict(extra="forbid")

    ref_id: str = Field(..., min_length=1, max_length=64)
    pattern: str = Field(..., min_length=1, max_length=10_000)
    context: int = Field(0, ge=0, le=MAX_GREP_CONTEXT)
    max_matches: int = Field(50, ge=1, le=MAX_GREP_MATCHES)
    ignore_case: bool = False
    start_line: int = Field(1, ge=1, le=MAX_SEQ)


def parse_arguments(model: type[Schema], arguments: dict[str, Any]) -> Any:
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in e["loc"]) or "arguments", "message": e["msg"]}
            for e in exc.errors()
        ]
        summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        raise ValidationFailed(summary or "Invalid arguments", details=errors) from None


def call_read(session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
    """``tool_output_cache``: lines of a stored output, capped like ``GET /refs/{ref}``."""
    args = parse_arguments(CacheReadArgs, arguments)
    output = output_get(owner=session.owner, ref=args.ref_id)
    # Lines cut like the session's views, as a `read` tool cuts long lines.
    max_line = cache_config(session).max_line_length
    result = read_page(
        output,
        offset=args.offset,
        limit=args.limit or DEFAULT_READ_LINES,
        max_line_length=max_line,
        char_offset=args.char_offset,
    )
    result["ref_id"] = result.pop("ref")
    return result


def call_grep(session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
    """``tool_output_cache_grep``: matches in a stored output, capped like ``GET /refs/{ref}/grep``."""
    args = parse_arguments(CacheGrepArgs, arguments)
    output = output_get(owner=session.owner, ref=args.ref_id)
    result = grep_page(
        output,
        pattern=args.pattern,
        context=args.context,
        max_matches=args.max_matches,
        ignore_case=args.ignore_case,
        start_line=args.start_line,
    )
    result["ref_id"] = result.pop("ref")
    return result


READ_TOOL = ToolDef(
    name="tool_output_cache",
    description=(
        "Read lines of a stored tool output. Large or old tool results in the conversation "
        "are cut or replaced by a note with a ref id (ref=out_…); this returns the stored "
        "output's lines with 1-based line numbers, like a file read tool. Use offset/limit "
        "to page through it; has_more and next_offset say whether more lines follow. A line "
        "too long to show whole is cut: continue_line gives the offset and char_offset that "
        "read on inside it."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "ref_id": {"type": "string", "description": "The ref id from the note, e.g. out_3f2a…"},
            "offset": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_SEQ,
                "description": "1-based number of the first line to read (default 1)",
            },
            "limit": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_SLICE_LINES,
                "description": "Number of lines to read (default 200; 0 also means 200)",
            },
            "char_offset": {
                "type": "integer",
                "minimum": 0,
                "description": (
                    "0-based character in the first line to start from, to page through a "
                    "line too long for one read (see continue_line; default 0)"
                ),
            },
        },
        "required": ["ref_id"],
        "additionalProperties": False,
    },
    category="builtin",
)

GREP_TOOL = ToolDef(
    name="tool_output_cache_grep",
    description=(
        "Search a stored tool output (by its ref id) with a regular expression. Returns the "
        "matching lines with 1-based line numbers and optional context lines, like grep -n; "
        "then read around a match with tool_output_cache. When has_more is true, call again "
        "with start_line set to next_offset for the following matches."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "ref_id": {"type": "string", "description": "The ref id from the note, e.g. out_3f2a…"},
            "pattern": {"type": "string", "description": "Regular expression (Python syntax)"},
            "context": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_GREP_CONTEXT,
                "description": "Lines of context before and after each match (default 0)",
            },
            "max_matches": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_GREP_MATCHES,
                "description": "Stop after this many matching lines (default 50)",
            },
            "ignore_case": {"type": "boolean", "description": "Case-insensitive (default false)"},
            "start_line": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SEQ,
                "description": "Skip matches before this line (default 1; see next_offset)",
            },
        },
        "required": ["ref_id", "pattern"],
        "additionalProperties": False,
    },
    category="builtin",
)
