"""Chunked blob store of tool outputs: store, upload, dedupe, look up
(docs/concepts/trimming.md#stored-in-full).

An output is a ``ToolOutput`` row plus ``ToolOutputChunk`` rows of ~256 KiB,
each cut after a newline when one is near the end (a longer line spans
chunks). Every chunk knows the number of the line holding its first byte, so
a slice finds its first line with one indexed lookup (``read``) and grep
streams the chunks a few MiB at a time (``grep``). A raw upload streams the
request body into chunks inside one transaction, so a failed upload leaves
nothing behind.

The bytes are kept exactly as posted (non-UTF-8 included); everything shown to
a model decodes with ``errors="replace"``. The blob is never tokenized: only
the view is (``contextsvc.engine.output_views``), and the blob's size is bytes/4 where
an estimate is needed (DESIGN.md: tokenizing 10 MB takes 2 s).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from contextsvc.engine.output_views import OutputInfo, count_lines_bytes
from contextsvc.errors import Conflict, NotFound, PayloadTooLarge, ValidationFailed

from ..models import AgentKey, Session, ToolOutput, ToolOutputChunk

CHUNK_BYTES = 256 * 1024
# A chunk ends after the last newline in its window unless that newline is in
# the first half: then the chunk is cut mid-line (a long line), so chunks stay
# between 128 and 256 KiB and a slice never reads more than a couple of them.
MIN_CHUNK_FRACTION = 2
READ_PIECE = 1024 * 1024  # raw upload: bytes read from the request at a time
INSERT_BATCH = 16  # chunks per INSERT (4 MiB of parameters)
REF_PREFIX = "out_"


def new_ref() -> str:
    """A fresh, unguessable output ref."""
    return REF_PREFIX + secrets.token_hex(12)


def content_ref(session: Session, sha256: str) -> str:
    """The ref an output posted in a message gets: keyed on the session and its bytes.

    Deterministic so that a tool-budget preview (docs/concepts/guard.md#tool-budget) names the very
    ref the posted result will carry, and so prices its view to the token; keyed
    with the secret key, so still unguessable without the bytes and the key.
    An upload (streamed, its hash known only at the end) keeps ``new_ref``.
    """
    key = hashlib.blake2b(settings.SECRET_KEY.encode(), digest_size=32).digest()
    digest = hashlib.blake2b(
        f"{session.pk}:{session.created_at.isoformat()}:{sha256}".encode(),
        key=key,
        digest_size=12,
    )
    return REF_PREFIX + digest.hexdigest()


# --- writing -----------------------------------------------------------------------


class _Chunker:
    """Turns a byte stream into chunk rows; hashes and counts on the way."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self.buf = bytearray()
        self.index = 0
        self.byte_offset = 0
        self.line = 1  # number of the line holding the next chunk's first byte
        self.sha = hashlib.sha256()
        self.size = 0
        self.last_byte = b""

    def feed(self, data: bytes) -> list[ToolOutputChunk]:
        if not data:
            return []
        self.sha.update(data)
        self.size += len(data)
        self.last_byte = data[-1:]
        self.buf += data
        out = []
        while len(self.buf) >= self.chunk_bytes:
            cut = self.buf.rfind(b"\n", 0, self.chunk_bytes)
            cut = cut + 1 if cut >= self.chunk_bytes // MIN_CHUNK_FRACTION else self.chunk_bytes
            out.append(self._chunk(bytes(self.buf[:cut])))
            del self.buf[:cut]
        return out

    def finish(self) -> list[ToolOutputChunk]:
        if not self.buf:
            return []
        chunk = self._chunk(bytes(self.buf))
        self.buf = bytearray()
        return [chunk]

    def _chunk(self, data: bytes) -> ToolOutputChunk:
        newlines = data.count(b"\n")
        chunk = ToolOutputChunk(
            index=self.index,
            first_line=self.line,
            line_count=newlines,
            byte_offset=self.byte_offset,
            data=data,
        )
        self.index += 1
        self.line += newlines
        self.byte_offset += len(data)
        return chunk

    @property
    def line_count(self) -> int:
        return count_lines_bytes(self.line - 1, self.size, self.last_byte == b"\n")

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


def _insert(output: ToolOutput, chunks: list[ToolOutputChunk]) -> None:
    for chunk in chunks:
        chunk.output = output
    ToolOutputChunk.objects.bulk_create(chunks, batch_size=INSERT_BATCH)


def _reuse(session: Session, sha256: str) -> ToolOutput | None:
    """The session's output with these bytes, touched so GC keeps it.

    The touch is an UPDATE, which waits for (and then sees) a GC that locked
    the row first: if GC deleted it, 0 rows change and the caller stores anew.
    """
    output = ToolOutput.objects.filter(session=session, sha256=sha256).first()
    if output is None:
        return None
    now = timezone.now()
    if not ToolOutput.objects.filter(pk=output.pk).update(last_used_at=now):
        return None
    output.last_used_at = now
    return output


def output_store_bytes(
    *, session: Session, data: bytes, tool_name: str = "", chunk_bytes: int = CHUNK_BYTES
) -> tuple[ToolOutput, bool]:
    """Store ``data`` in full (or find the session's identical output); → (output, deduplicated)."""
    sha256 = hashlib.sha256(data).hexdigest()
    existing = _reuse(session, sha256)
    if existing is not None:
        return existing, True
    pending = pending_output(session, data, sha256, tool_name, chunk_bytes)
    output = pending.output
    try:
        with transaction.atomic():
            output.save(force_insert=True)
            _insert(output, pending.chunks)
    except IntegrityError:
        # The same bytes stored concurrently by another request of this session.
        existing = _reuse(session, sha256)
        if existing is None:
            raise
        return existing, True
    return output, False


class _Duplicate(Exception):
    def __init__(self, output: ToolOutput) -> None:
        self.output = output


def output_upload(
    *,
    session: Session,
    read: Callable[[int], bytes],
    tool_name: str = "",
    content_length: int | None = None,
    max_bytes: int | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> tuple[ToolOutput, bool]:
    """Stream a raw upload into storage (``PUT /sessions/{sid}/outputs``).

    ``read(n)`` is the request stream's read (never ``request.body``): at most
    ~1.5 MiB is held at a time. Everything happens in one transaction, so a
    failed or oversized upload leaves no output visible. An upload identical to
    an output the session already has is dropped and the existing ref returned.
    """
    limit = settings.CONTEXTSVC_MAX_UPLOAD_BYTES if max_bytes is None else max_bytes
    if content_length is not None and content_length > limit:
        raise _too_large(limit)
    chunker = _Chunker(chunk_bytes)
    try:
        with transaction.atomic():
            output = ToolOutput.objects.create(
                ref=new_ref(), session=session, tool_name=tool_name or "", source="upload"
            )
            pending: list[ToolOutputChunk] = []
            while True:
                piece = read(READ_PIECE)
                if not piece:
                    break
                if chunker.size + len(piece) > limit:
                    raise _too_large(limit)
                pending.extend(chunker.feed(piece))
                if len(pending) >= INSERT_BATCH:
                    _insert(output, pending)
                    pending = []
            pending.extend(chunker.finish())
            _insert(output, pending)
            sha256 = chunker.hexdigest()
            duplicate = ToolOutput.objects.filter(session=session, sha256=sha256).first()
            if duplicate is not None:
                raise _Duplicate(duplicate)  # rolls the new rows back
            output.sha256 = sha256
            output.byte_size = chunker.size
            output.line_count = chunker.line_count
            output.chunk_count = chunker.index
            output.save(update_fields=["sha256", "byte_size", "line_count", "chunk_count"])
    except _Duplicate as dup:
        reused = _reuse(session, dup.output.sha256 or "")
        if reused is None:  # collected by GC between the two statements
            raise Conflict(
                "The identical output was deleted during the upload; upload again"
            ) from None
        return reused, True
    except IntegrityError:
        # The same bytes uploaded concurrently into this session.
        reused = _reuse(session, chunker.hexdigest())
        if reused is None:
            raise
        return reused, True
    return output, False


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"Upload exceeds {limit:,} bytes (CONTEXTSVC_MAX_UPLOAD_BYTES)",
        details={"max_bytes": limit},
    )


@dataclass(slots=True)
class PendingOutput:
    """A small output ready to insert under the append lock (see ``ingest.DEFER_BYTES``)."""

    output: ToolOutput  # unsaved, with its provisional ref
    chunks: list[ToolOutputChunk]


def pending_output(
    session: Session, data: bytes, sha256: str, tool_name: str, chunk_bytes: int = CHUNK_BYTES
) -> PendingOutput:
    """``data`` cut into chunk rows, nothing saved yet (the caller inserts them)."""
    chunker = _Chunker(chunk_bytes)
    chunks: list[ToolOutputChunk] = []
    view = memoryview(data)
    for start in range(0, len(data), READ_PIECE):  # bounded copies of a large output
        chunks.extend(chunker.feed(bytes(view[start : start + READ_PIECE])))
    chunks.extend(chunker.finish())
    output = ToolOutput(
        ref=content_ref(session, sha256),
        session=session,
        tool_name=tool_name or "",
        byte_size=len(data),
        line_count=chunker.line_count,
        chunk_count=len(chunks),
        sha256=sha256,
        source="message",
    )
    return PendingOutput(output=output, chunks=chunks)


# --- lookup ------------------------------------------------------------------------


def output_get(*, owner: AgentKey, ref: str) -> ToolOutput:
    """An output of one of ``owner``'s sessions; anyone else's is a 404 (never a 403)."""
    if len(ref) > 64 or "\x00" in ref:  # could not be stored: not found, not a database error
        raise NotFound(f"Output {ref!r} not found")
    output = (
        ToolOutput.objects.filter(ref=ref, session__owner=owner, sha256__isnull=False)
        .select_related("session")
        .first()
    )
    if output is None:
        raise NotFound(f"Output {ref!r} not found")
    return output


def output_touch(*, session: Session, ref: str, field_name: str = "output_ref") -> ToolOutput:
    """An output of this session, touched (a message is about to reference it)."""
    output = ToolOutput.objects.filter(ref=ref, session=session, sha256__isnull=False).first()
    now = timezone.now()
    if output is None or not ToolOutput.objects.filter(pk=output.pk).update(last_used_at=now):
        raise ValidationFailed(
            f"{field_name} {ref!r} is not an output of this session",
            details={"field": field_name},
        )
    output.last_used_at = now
    return output


def output_info(output: ToolOutput, tool_name: str | None = None) -> OutputInfo:
    """What a view needs to know of the stored output (the engine's ``OutputInfo``)."""
    return OutputInfo(
        ref=output.ref,
        byte_size=output.byte_size,
        line_count=output.line_count,
        tool_name=tool_name or output.tool_name,
    )


def ref_dict(output: ToolOutput) -> dict[str, Any]:
    """docs/concepts/trimming.md#output-ref."""
    return {"id": output.ref, "byte_size": output.byte_size, "line_count": output.line_count}
