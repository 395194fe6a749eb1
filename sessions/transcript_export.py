"""The transcript download, one response for both doors: the agent API's
``GET /sessions/{sid}/export`` and the dashboard inspector's "Download transcript".

The body is JSONL streamed chunk by chunk (``selectors_transcript``), so the
worker's memory stays flat whatever the session's length. It holds the
messages up to the last one at the start (``X-Transcript-Last-Seq``); later
appends are not part of it.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from django.http import StreamingHttpResponse

from .models import Session
from .selectors_transcript import native_lines, transcript_lines

JSONL = "application/x-ndjson"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def export_filename(external_id: str, fmt: str | None) -> str:
    """``<sid>.jsonl`` (``<sid>.<format>.jsonl`` for a native format)."""
    return f"{external_id}.{fmt}.jsonl" if fmt else f"{external_id}.jsonl"


def disposition(filename: str) -> str:
    """``Content-Disposition`` of a download named ``filename``."""
    # A session id is the agent's own text: quotes, slashes or non-ASCII would
    # break the header, so the plain name is made safe and RFC 6266's
    # ``filename*`` carries the exact one.
    safe = _UNSAFE.sub("_", filename)
    if safe == filename:
        return f'attachment; filename="{filename}"'
    return f"attachment; filename=\"{safe}\"; filename*=UTF-8''{quote(filename, safe='')}"


def export_response(session: Session, fmt: str | None = None) -> StreamingHttpResponse:
    """The whole transcript as a JSONL download: the listing's items, or with ``fmt``
    (anthropic, openai) the provider's native messages."""
    lines = native_lines(session, fmt) if fmt else transcript_lines(session)
    response = StreamingHttpResponse(lines, content_type=JSONL)
    response["Content-Disposition"] = disposition(export_filename(session.external_id, fmt))
    response["X-Transcript-Last-Seq"] = str(session.last_seq)
    response["X-Content-Type-Options"] = "nosniff"
    return response
