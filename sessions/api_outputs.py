"""Tool output cache API: upload, list, slices, grep, download, tool budget
(docs/concepts/trimming.md#reading-refs, docs/concepts/guard.md#tool-budget).

Handlers stay thin: parse, call ``sessions.outputs``, return data. Refs are
looked up through the caller's key, so another key's ref is a 404.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Header, Query, Router, Schema
from ninja.responses import Status
from pydantic import ConfigDict, Field, model_validator

from contextsvc import nul
from contextsvc.errors import ValidationFailed
from contextsvc.openapi import ErrorOut, declare_errors

from . import selectors
from .models import Session, ToolOutput
from .outputs.pages import (
    MAX_GREP_CONTEXT,
    MAX_GREP_MATCHES,
    MAX_SLICE_LINES,
    grep_page,
    read_page,
)
from .outputs.read import DEFAULT_SLICE_LINES, output_iter_bytes
from .outputs.reservations import (
    session_release_tool_reservation,
    session_reserve_tool_output,
    tool_output_preview,
)
from .outputs.store import output_get, output_upload, ref_dict
from .schemas_base import MAX_ID, MAX_SEQ, MAX_TOKENS, exactly_one_of
from .schemas_out import (
    GrepOut,
    OutputListOut,
    OutputOut,
    PreviewOut,
    ReleaseOut,
    ReserveOut,
    SliceOut,
)

router = Router(tags=["outputs"])

MAX_LINE_CHARS = 1_000_000


def _session(request: HttpRequest, sid: str) -> Session:
    return selectors.session_get(owner=request.auth, external_id=sid)


def _output_dict(output: ToolOutput, *, deduplicated: bool = False) -> dict[str, Any]:
    return {
        **ref_dict(output),
        "ref": output.ref,
        "tool_name": output.tool_name,
        "sha256": output.sha256,
        "source": output.source,
        "created_at": output.created_at,
        "deduplicated": deduplicated,
    }


# --- raw upload ---------------------------------------------------------------------


# The raw bytes of an output, as uploaded and as downloaded (not JSON).
_BINARY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "description": "The tool output's bytes, as the tool produced them",
        "content": _BINARY,
    }
}


@router.put(
    "/sessions/{sid}/outputs",
    response={201: OutputOut, 200: OutputOut, 409: ErrorOut},
    openapi_extra=_UPLOAD_BODY,
)
def upload_output(
    request: HttpRequest,
    sid: str,
    tool_name: str = Header("", alias="X-Tool-Name", max_length=200),
):
    """Upload a tool output too big for a JSON body; stream it, never hold it whole.

    Reads ``request.read(n)`` (not ``request.body``, which Django caps at
    DATA_UPLOAD_MAX_MEMORY_SIZE and holds in memory) up to
    CONTEXTSVC_MAX_UPLOAD_BYTES. A tool message then carries ``output_ref``.
    """
    nul.reject_in_text(tool_name, "X-Tool-Name")
    session = _session(request, sid)
    output, deduplicated = output_upload(
        session=session, tool_name=tool_name, **_upload_stream(request)
    )
    return Status(200 if deduplicated else 201, _output_dict(output, deduplicated=deduplicated))


def _upload_stream(request: HttpRequest) -> dict[str, Any]:
    """Where an upload's bytes come from: ``read`` and the announced length.

    With a Content-Length, Django's request stream stops there. A chunked body
    (``curl -T -`` from a pipe) has none, and Django then reads nothing; but
    a server that de-chunks it and marks the input as ending at the body's end
    (``wsgi.input_terminated``: gunicorn does) can be read to EOF; the size
    limit is enforced as the bytes arrive. Other servers (the dev server)
    cannot tell where the body ends: refused rather than stored empty.
    """
    meta = request.META
    length = meta.get("CONTENT_LENGTH") or ""
    if length.isdigit():
        return {"read": request.read, "content_length": int(length)}
    if "chunked" not in meta.get("HTTP_TRANSFER_ENCODING", "").lower():
        return {"read": request.read, "content_length": None}
    if meta.get("wsgi.input_terminated"):
        return {"read": meta["wsgi.input"].read, "content_length": None}
    raise ValidationFailed(
        "This server cannot read a chunked upload: send a Content-Length "
        "(or serve the API with gunicorn, which accepts chunked bodies)",
        details={"field": "Content-Length"},
    )


class OutputListQuery(Schema):
    cursor: int | None = Field(None, ge=1, le=MAX_ID)
    limit: int = Field(50, ge=1, le=200)


@router.get("/sessions/{sid}/outputs", response=OutputListOut)
def list_outputs(request: HttpRequest, sid: str, q: Query[OutputListQuery]):
    session = _session(request, sid)
    qs = session.outputs.filter(sha256__isnull=False).order_by("-id")
    if q.cursor:
        qs = qs.filter(id__lt=q.cursor)
    page = list(qs[: q.limit + 1])
    next_cursor = page[q.limit - 1].id if len(page) > q.limit else None
    return {"items": [_output_dict(o) for o in page[: q.limit]], "next_cursor": next_cursor}


# --- expansion and grep -----------------------------------------------------------------


class SliceQuery(Schema):
    # docs/concepts/trimming.md#reading-refs / DESIGN: offset is the 1-based first line (0 = from
    # the start).
    offset: int = Field(1, ge=0, le=MAX_SEQ)
    # 0: the default number of lines, as an omitted limit (not an error).
    limit: int = Field(DEFAULT_SLICE_LINES, ge=0, le=MAX_SLICE_LINES)
    max_line_length: int | None = Field(None, ge=1, le=MAX_LINE_CHARS)
    # Paging inside one very long line: the first line from this character on.
    char_offset: int = Field(0, ge=0, le=2**40)


class GrepQuery(Schema):
    pattern: str = Field(..., min_length=1, max_length=10_000)
    context: int = Field(0, ge=0, le=MAX_GREP_CONTEXT)
    max_matches: int = Field(100, ge=1, le=MAX_GREP_MATCHES)
    ignore_case: bool = False
    # Where a capped answer's next_offset says to go on.
    start_line: int = Field(1, ge=1, le=MAX_SEQ)


@router.get("/refs/{ref}", response=SliceOut, exclude_unset=True)
def get_ref(request: HttpRequest, ref: str, q: Query[SliceQuery]):
    output = output_get(owner=request.auth, ref=ref)
    return read_page(
        output,
        offset=q.offset,
        limit=q.limit,
        max_line_length=q.max_line_length,
        char_offset=q.char_offset,
    )


@router.get("/refs/{ref}/grep", response=GrepOut, exclude_unset=True)
def grep_ref(request: HttpRequest, ref: str, q: Query[GrepQuery]):
    output = output_get(owner=request.auth, ref=ref)
    return grep_page(
        output,
        pattern=q.pattern,
        context=q.context,
        max_matches=q.max_matches,
        ignore_case=q.ignore_case,
        start_line=q.start_line,
    )


_RAW_BYTES = {
    "responses": {200: {"description": "The stored bytes exactly as posted", "content": _BINARY}}
}


@router.get("/refs/{ref}/raw", response={200: None}, openapi_extra=_RAW_BYTES)
def download_ref(request: HttpRequest, ref: str):
    """The stored bytes exactly as posted, streamed chunk by chunk."""
    output = output_get(owner=request.auth, ref=ref)
    response = StreamingHttpResponse(
        output_iter_bytes(output), content_type="application/octet-stream"
    )
    response["Content-Length"] = str(output.byte_size)
    response["Content-Disposition"] = f'attachment; filename="{output.ref}.txt"'
    return response


# --- tool budget (docs/concepts/guard.md#tool-budget) ---------------------------------------------


class ToolCostIn(Schema):
    # Exactly one size, checked below and declared in the schema.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=exactly_one_of(bytes="integer", tokens="integer", text="string"),
    )

    tool_call_id: str | None = Field(None, min_length=1, max_length=200)
    bytes: int | None = Field(None, ge=0, le=2**40)
    tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    text: str | None = None

    @model_validator(mode="after")
    def _one_size(self) -> ToolCostIn:
        given = [k for k in ("bytes", "tokens", "text") if getattr(self, k) is not None]
        if len(given) != 1:
            # Named like the service's other 422s: the second size given, or bytes when none is.
            raise ValidationFailed(
                "Give exactly one of bytes, tokens or text",
                details={"field": given[1] if given else "bytes"},
            )
        return self


class ReleaseIn(Schema):
    model_config = ConfigDict(extra="forbid")

    tool_call_id: str | None = Field(None, min_length=1, max_length=200)


@router.post("/sessions/{sid}/tools/preview", tags=["tools"], response=PreviewOut)
def preview_tool_output(request: HttpRequest, sid: str, payload: ToolCostIn):
    """docs/concepts/guard.md#tool-budget: the in-context cost of an output, reserving nothing."""
    return tool_output_preview(_session(request, sid), **payload.model_dump(exclude_none=True))


@router.post("/sessions/{sid}/tools/reserve", tags=["tools"], response=ReserveOut)
def reserve_tool_output(request: HttpRequest, sid: str, payload: ToolCostIn):
    """docs/concepts/guard.md#tool-budget: held as the guard's pending tokens until the result
    arrives."""
    return session_reserve_tool_output(
        session=_session(request, sid), **payload.model_dump(exclude_none=True)
    )


@router.post("/sessions/{sid}/tools/release", tags=["tools"], response=ReleaseOut)
def release_tool_output(request: HttpRequest, sid: str, payload: ReleaseIn):
    return session_release_tool_reservation(
        session=_session(request, sid), tool_call_id=payload.tool_call_id
    )


declare_errors(router)
