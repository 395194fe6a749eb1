"""The transcript out: every message of a session, paged or exported.

``GET /sessions/{sid}/messages`` pages through the whole transcript in seq
order (the POST of the same path appends; both live on the sessions router,
which registers ``list_messages`` beside its POST: one path, one router).
``GET /sessions/{sid}/export`` streams it as JSONL. Handlers stay thin: parse,
call ``selectors_transcript`` / ``transcript_export``, return. Another key's
session is a 404.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Query, Router

from contextsvc.errors import ValidationFailed
from contextsvc.http import json_response
from contextsvc.openapi import declare_errors

from . import selectors
from .models import Session
from .schemas_base import MAX_SEQ
from .schemas_transcript import ExportQuery, TranscriptQuery
from .selectors_transcript import transcript_page
from .transcript_export import JSONL, export_response

router = Router(tags=["sessions"])

_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _session(request: HttpRequest, sid: str) -> Session:
    return selectors.session_get(owner=request.auth, external_id=sid)


def encode_cursor(seq: int) -> str:
    """An opaque cursor: where a page ended (clients pass it back, never build it).

    ``s`` and the seq in base 36: every string of ``CURSOR_PATTERN`` is one, so the
    schema states the rule the handler enforces (but for a seq past the largest).
    """
    digits = ""
    while True:
        seq, digit = divmod(seq, 36)
        digits = _BASE36[digit] + digits
        if not seq:
            return "s" + digits


def decode_cursor(cursor: str | None) -> int:
    """The seq a cursor of ``encode_cursor`` names (0 without one); else a 422 naming it."""
    if not cursor:
        return 0
    seq = int(cursor[1:], 36)  # the schema's pattern let only base-36 digits through
    if seq > MAX_SEQ:
        raise ValidationFailed(
            "cursor: not a cursor this API gave (pass next_cursor back as it came)",
            details={"field": "cursor"},
        )
    return seq


def list_messages(request: HttpRequest, sid: str, q: Query[TranscriptQuery]) -> HttpResponse:
    """The whole transcript in seq order, a page at a time: live, compacted and
    retracted messages alike, each with its state."""
    after = decode_cursor(q.cursor)
    items, last = transcript_page(_session(request, sid), after_seq=after, limit=q.limit)
    # Rendered here, as the export renders its lines: the JSON columns pass through
    # as fragments (TranscriptPageOut states the shape; the contract tests hold it).
    return json_response(
        {"items": items, "next_cursor": encode_cursor(last) if last is not None else None}
    )


_EXPORT_BODY = {
    "responses": {
        200: {
            "description": "JSONL, one message per line (a download: <sid>.jsonl)",
            "content": {JSONL: {"schema": {"type": "string"}}},
        }
    }
}


@router.get("/sessions/{sid}/export", response={200: None}, openapi_extra=_EXPORT_BODY)
def export_transcript(
    request: HttpRequest, sid: str, q: Query[ExportQuery]
) -> StreamingHttpResponse:
    """The whole transcript as JSONL, streamed: the listing's items one per line, or
    with ``format`` the provider's native messages (retracted ones left out)."""
    return export_response(_session(request, sid), q.format)


declare_errors(router)
