"""Tool output storage: chunked blobs, slices, grep, GC (spec 000 §1.5/§1.8/§1.9, spec 002 §2).

An output is a ``ToolOutput`` row plus ``ToolOutputChunk`` rows of ~256 KiB,
each cut after a newline when one is near the end (a longer line spans
chunks). Every chunk knows the number of the line holding its first byte, so:

- a slice finds its first line with one indexed lookup and reads one or two
  chunks, wherever the range is in a 200 MB output;
- grep streams the chunks a few MiB at a time, never the whole blob;
- a raw upload streams the request body into chunks inside one transaction,
  so a failed upload leaves nothing behind.

The bytes are kept exactly as posted (non-UTF-8 included); everything shown to
a model decodes with ``errors="replace"``. The blob is never tokenized: only
the view is (``contextsvc.engine.output_views``), and the blob's size is bytes/4 where
an estimate is needed (DESIGN.md: tokenizing 10 MB takes 2 s).
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
import regex
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max, Sum
from django.utils import timezone

from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.output_trim import TrimCandidate, plan_trim, tool_output_budget, trimmed_view
from contextsvc.engine.output_views import (
    OutputInfo,
    View,
    ViewConfig,
    count_lines,
    count_lines_bytes,
    failed_view,
    iter_text_lines,
    make_view,
    resolve_view_config,
    view_bytes_estimate,
)
from contextsvc.engine.tokens import estimate_message, estimate_text
from contextsvc.errors import Conflict, NotFound, PayloadTooLarge, ValidationFailed

from . import hotpath, status
from .extensions import REGISTRY
from .models import AgentKey, Message, Session, ToolOutput, ToolOutputChunk

CHUNK_BYTES = 256 * 1024
# A chunk ends after the last newline in its window unless that newline is in
# the first half: then the chunk is cut mid-line (a long line), so chunks stay
# between 128 and 256 KiB and a slice never reads more than a couple of them.
MIN_CHUNK_FRACTION = 2
READ_PIECE = 1024 * 1024  # raw upload: bytes read from the request at a time
INSERT_BATCH = 16  # chunks per INSERT (4 MiB of parameters)
GREP_BUFFER_CHUNKS = 16  # chunks decoded and searched at once (~4 MiB)
# Grep of one line longer than this searches it piece by piece instead of
# holding it whole (a 200 MB minified file is one line).
GREP_MAX_LINE_BYTES = 4 * 1024 * 1024
GREP_LINE_CHARS = 2000  # a matched or context line is shown up to this many characters
CUT_MARK = " […line cut]"
REF_PREFIX = "out_"


def new_ref() -> str:
    return REF_PREFIX + secrets.token_hex(12)


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
    pending = _pending_output(session, data, sha256, tool_name, chunk_bytes)
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


def output_for_session(*, session: Session, ref: str, field_name: str = "output_ref") -> ToolOutput:
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
    return OutputInfo(
        ref=output.ref,
        byte_size=output.byte_size,
        line_count=output.line_count,
        tool_name=tool_name or output.tool_name,
    )


def ref_dict(output: ToolOutput) -> dict[str, Any]:
    """spec 000 §1.4 ToolOutputRef."""
    return {"id": output.ref, "byte_size": output.byte_size, "line_count": output.line_count}


# --- reading -----------------------------------------------------------------------


@dataclass(slots=True)
class _Chunk:
    index: int
    first_line: int
    line_count: int
    data: bytes


def _row(row: tuple) -> _Chunk:
    index, first_line, line_count, data = row
    return _Chunk(index, first_line, line_count, bytes(data))  # psycopg gives memoryview


_CHUNK_FIELDS = ("index", "first_line", "line_count", "data")


def _iter_chunks(
    output_id: int, start: int, *, batch: int = 1, max_batch: int = 8
) -> Iterator[_Chunk]:
    """Chunks from ``start`` on, fetched in growing batches (1, 2, 4, …).

    A slice usually needs one or two chunks; a grep needs them all. Growing
    batches serve both without holding more than ``max_batch`` chunks.
    """
    index = start
    while True:
        rows = list(
            ToolOutputChunk.objects.filter(
                output_id=output_id, index__gte=index, index__lt=index + batch
            )
            .order_by("index")
            .values_list(*_CHUNK_FIELDS)
        )
        if not rows:
            return
        for row in rows:
            yield _row(row)
        index += len(rows)
        if len(rows) < batch:
            return
        batch = min(batch * 2, max_batch)


def _locate(output: ToolOutput, line: int) -> tuple[int, int, bytes] | None:
    """(chunk index, byte position, chunk data) where line ``line`` starts.

    Line L starts after newline L-1, which lies in the chunk with the greatest
    ``first_line < L`` (see ToolOutputChunk); the position may be the end of
    that chunk's data, meaning the line starts in the next chunk.
    """
    if line <= 1:
        first = next(_iter_chunks(output.pk, 0), None)
        return (0, 0, first.data) if first is not None else None
    row = (
        ToolOutputChunk.objects.filter(output_id=output.pk, first_line__lt=line)
        .order_by("-first_line", "-index")
        .values_list(*_CHUNK_FIELDS)
        .first()
    )
    if row is None:
        return None
    chunk = _row(row)
    pos = 0
    for _ in range(line - chunk.first_line):
        pos = chunk.data.index(b"\n", pos) + 1
    return chunk.index, pos, chunk.data


@dataclass(frozen=True, slots=True)
class RawLine:
    number: int
    data: bytes  # at most the requested bytes of the line, without its newline
    cut: bool  # the line is longer than ``data``


def iter_raw_lines(
    output: ToolOutput, start_line: int = 1, *, max_line_bytes: int
) -> Iterator[RawLine]:
    """Lines from ``start_line`` on, each at most ``max_line_bytes`` bytes.

    The rest of a longer line is skipped with an index lookup, not read: a
    10 MB line costs one query, not 10 MB of I/O.
    """
    start_line = max(start_line, 1)
    if output.byte_size == 0 or start_line > output.line_count:
        return
    located = _locate(output, start_line)
    if located is None:
        return
    index, pos, data = located
    chunks = _iter_chunks(output.pk, index + 1)
    number = start_line
    parts: list[bytes] = []
    have = 0
    cut = False
    while True:
        nl = data.find(b"\n", pos)
        end = nl if nl != -1 else len(data)
        if not cut:
            room = max_line_bytes - have
            if end - pos > room:
                parts.append(data[pos : pos + room])
                have += room
                cut = True
            else:
                parts.append(data[pos:end])
                have += end - pos
        if nl != -1:
            yield RawLine(number, b"".join(parts), cut)
            number += 1
            if number > output.line_count:
                return
            parts, have, cut = [], 0, False
            pos = nl + 1
            continue
        if cut:
            # The line goes on past this chunk: emit its head, jump to the next line.
            yield RawLine(number, b"".join(parts), True)
            number += 1
            if number > output.line_count:
                return
            parts, have, cut = [], 0, False
            located = _locate(output, number)
            if located is None:
                return
            index, pos, data = located
            chunks = _iter_chunks(output.pk, index + 1)
            continue
        following = next(chunks, None)
        if following is None:
            if parts and (have or number <= output.line_count):
                yield RawLine(number, b"".join(parts), False)
            return
        data, pos = following.data, 0


def _decode(raw: RawLine, max_chars: int | None) -> tuple[str, bool]:
    text = raw.data.decode("utf-8", errors="replace")
    cut = raw.cut
    if cut and text.endswith("\ufffd"):
        text = text[:-1]  # a character split by the byte cut, not bad input
    if max_chars is not None and len(text) > max_chars:
        text, cut = text[:max_chars], True
    return text, cut


def output_line_heads(output: ToolOutput, *, max_chars: int) -> Iterator[str]:
    """Each line's first ``max_chars + 1`` characters (what ``make_view`` needs)."""
    # 4 bytes per character at most, so this many bytes decode to at least
    # max_chars + 1 characters whenever the line is longer.
    for raw in iter_raw_lines(output, 1, max_line_bytes=4 * (max_chars + 1)):
        yield raw.data.decode("utf-8", errors="replace")[: max_chars + 1]


def output_read_all(output: ToolOutput) -> bytes:
    """The whole blob; only for outputs known to be small (a full view)."""
    return b"".join(c.data for c in _iter_chunks(output.pk, 0, max_batch=16))


def output_iter_bytes(output: ToolOutput) -> Iterator[bytes]:
    """The blob chunk by chunk (a download streams this)."""
    for chunk in _iter_chunks(output.pk, 0, max_batch=4):
        yield chunk.data


def output_slice(
    output: ToolOutput,
    *,
    offset: int = 1,
    limit: int = 100,
    max_line_length: int | None = None,
    max_bytes: int | None = None,
    json_bytes: bool = False,
) -> dict[str, Any]:
    """spec 000 §1.8: lines ``offset`` … ``offset + limit - 1``, numbered like a ``read`` tool.

    ``offset`` is the 1-based first line (0 reads from the start). Past the end
    the slice is empty, not an error. The text is capped at ``max_bytes``
    (a slice stops early with ``has_more``); ``max_line_length`` cuts each line.
    ``json_bytes``: the cap counts the text as it will be sent in JSON (with
    its escapes), so an answer of escaped characters fits in one read.
    """
    if limit <= 0:
        raise ValidationFailed(
            "limit must be a positive number of lines", details={"field": "limit"}
        )
    if offset < 0:
        raise ValidationFailed("offset must be a 1-based line number", details={"field": "offset"})
    cap = settings.CONTEXTSVC_SLICE_MAX_BYTES if max_bytes is None else max_bytes
    start = max(offset, 1)
    per_line = 4 * (max_line_length + 1) if max_line_length else cap
    entries: list[str] = []
    cut_lines: list[int] = []
    size = 0
    last = start - 1
    truncated = False
    for raw in iter_raw_lines(output, start, max_line_bytes=per_line):
        text, cut = _decode(raw, max_line_length)
        entry = f"{raw.number:>6}\t{text}{CUT_MARK if cut else ''}"
        # + 1: the newline joining entries (two bytes, "\n", in JSON).
        entry_size = len(orjson.dumps(entry)) if json_bytes else len(entry.encode("utf-8")) + 1
        if entries and size + entry_size > cap:
            truncated = True
            break
        entries.append(entry)
        size += entry_size
        if cut:
            cut_lines.append(raw.number)
        last = raw.number
        if len(entries) >= limit:
            break
    has_more = last < output.line_count
    return {
        "ref": output.ref,
        "tool_name": output.tool_name,
        "offset": start,
        "limit": limit,
        "lines": len(entries),
        "total_lines": output.line_count,
        "byte_size": output.byte_size,
        "has_more": has_more,
        "next_offset": last + 1 if has_more else None,
        "truncated": truncated,
        "cut_lines": cut_lines,
        "text": "\n".join(entries),
    }


# --- grep --------------------------------------------------------------------------


def _compile(pattern: str, ignore_case: bool) -> regex.Pattern:
    flags = regex.MULTILINE
    if ignore_case:
        flags |= regex.IGNORECASE
    try:
        return regex.compile(pattern, flags)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise ValidationFailed(
            f"Invalid regular expression: {exc}", details={"field": "pattern", "reason": str(exc)}
        ) from None


def _iter_text_buffers(output: ToolOutput) -> Iterator[tuple[str, int]]:
    """(decoded text, number of its first line), a few MiB at a time, split after newlines.

    A line longer than GREP_MAX_LINE_BYTES is handed over in pieces (cut on a
    character boundary); the next piece then starts with the same line number.
    """
    carry = b""
    line = 1
    pieces: list[bytes] = []
    size = 0
    for chunk in _iter_chunks(output.pk, 0, max_batch=GREP_BUFFER_CHUNKS):
        pieces.append(chunk.data)
        size += len(chunk.data)
        if size < GREP_BUFFER_CHUNKS * CHUNK_BYTES:
            continue
        data = carry + b"".join(pieces)
        pieces, size = [], 0
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) <= GREP_MAX_LINE_BYTES:
                carry = data
                continue
            cut = _char_boundary(data, GREP_MAX_LINE_BYTES)
        yield data[:cut].decode("utf-8", errors="replace"), line
        line += data.count(b"\n", 0, cut)
        carry = data[cut:]
    data = carry + b"".join(pieces)
    if data:
        yield data.decode("utf-8", errors="replace"), line


def _char_boundary(data: bytes, at: int) -> int:
    """``at`` moved back over UTF-8 continuation bytes (at most 3)."""
    pos = at
    while pos > at - 3 and pos > 0 and 0x80 <= data[pos] < 0xC0:
        pos -= 1
    return pos


@dataclass(slots=True)
class _Match:
    line: int
    text: str
    before: list[dict[str, Any]]
    after: list[dict[str, Any]] = field(default_factory=list)
    after_needed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "text": self.text, "before": self.before, "after": self.after}


def _show(text: str) -> str:
    if text.endswith("\r"):
        text = text[:-1]
    return text if len(text) <= GREP_LINE_CHARS else text[:GREP_LINE_CHARS] + CUT_MARK


def _lines_forward(text: str, pos: int, first_number: int, n: int) -> list[dict[str, Any]]:
    """Up to ``n`` whole lines of ``text`` starting at ``pos`` (a line start)."""
    out = []
    number = first_number
    while len(out) < n and pos < len(text):
        nl = text.find("\n", pos)
        if nl == -1:
            out.append({"line": number, "text": _show(text[pos:])})
            break
        out.append({"line": number, "text": _show(text[pos:nl])})
        number += 1
        pos = nl + 1
    return out


def _lines_backward(text: str, line_start: int, number: int, n: int) -> list[dict[str, Any]]:
    """Up to ``n`` lines before the line starting at ``line_start`` (numbered ``number``)."""
    out: list[dict[str, Any]] = []
    end = line_start - 1  # the newline ending the previous line
    while len(out) < n and end >= 0:
        start = text.rfind("\n", 0, end) + 1
        number -= 1
        out.append({"line": number, "text": _show(text[start:end])})
        end = start - 1
    out.reverse()
    return out


def output_grep(
    output: ToolOutput,
    *,
    pattern: str,
    context: int = 0,
    max_matches: int = 100,
    ignore_case: bool = False,
    time_limit: float | None = None,
    start_line: int = 1,
) -> dict[str, Any]:
    """Lines matching ``pattern`` (``regex`` syntax), 1-based, with context lines.

    Matches before ``start_line`` are skipped (a capped answer continues there).

    Streams the output a few MiB at a time. A match is reported on the line it
    starts in when the pattern also matches inside that line alone (grep is
    line-based: a pattern that only matches across a newline does not count).
    The whole search has a time limit; the ``regex`` engine checks it while
    backtracking, so a catastrophic pattern is stopped and answered 422
    instead of hanging the worker (Python's ``re`` cannot be interrupted).
    """
    if not pattern:
        raise ValidationFailed("pattern must not be empty", details={"field": "pattern"})
    if max_matches <= 0:
        raise ValidationFailed("max_matches must be positive", details={"field": "max_matches"})
    if context < 0:
        raise ValidationFailed("context must not be negative", details={"field": "context"})
    rx = _compile(pattern, ignore_case)
    limit = settings.CONTEXTSVC_GREP_TIME_LIMIT_MS / 1000 if time_limit is None else time_limit
    deadline = time.monotonic() + limit

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _grep_timeout(limit)
        return left

    matches: list[_Match] = []
    waiting: list[_Match] = []  # matches whose after-context goes on in the next buffer
    tail: deque[dict[str, Any]] = deque(maxlen=max(context, 1))  # last lines of the previous buffer
    truncated = False
    last_line = 0
    searched_to = 0
    try:
        for text, first_line in _iter_text_buffers(output):
            if waiting:
                for m in waiting:
                    m.after.extend(
                        _lines_forward(text, 0, first_line, m.after_needed - len(m.after))
                    )
                waiting = [m for m in waiting if len(m.after) < m.after_needed]
            if truncated:
                if waiting:
                    continue
                break
            pos = 0
            counted_pos, counted_line = 0, first_line  # line number of ``counted_pos``
            while pos <= len(text):
                found = rx.search(text, pos, timeout=remaining())
                if found is None:
                    break
                start = found.start()
                if start == len(text) and (not text or text[-1] == "\n"):
                    break  # an empty match after the last newline: that line is the next buffer's
                line_start = text.rfind("\n", 0, start) + 1
                line_end = text.find("\n", start)
                if line_end == -1:
                    line_end = len(text)
                line_text = text[line_start:line_end]
                at_newline = start == line_end < len(text) and found.end() > start
                if found.end() > line_end or at_newline:
                    # The match runs over a newline: grep is line-based, so the
                    # line counts only if the pattern matches inside it alone.
                    if rx.search(line_text, timeout=remaining()) is None:
                        pos = start + 1
                        continue
                counted_line += text.count("\n", counted_pos, line_start)
                counted_pos = line_start
                number = counted_line
                pos = line_end + 1
                if number == last_line:  # another piece of one very long line
                    continue
                last_line = number
                if number < start_line:
                    continue
                before: list[dict[str, Any]] = []
                if context:
                    before = _lines_backward(text, line_start, number, context)
                    if len(before) < context:
                        first = before[0]["line"] if before else number
                        older = [t for t in tail if t["line"] < first]
                        before = older[max(0, len(older) - (context - len(before))) :] + before
                match = _Match(line=number, text=_show(line_text), before=before)
                if context:
                    match.after_needed = min(context, max(output.line_count - number, 0))
                    match.after = _lines_forward(text, line_end + 1, number + 1, match.after_needed)
                    if len(match.after) < match.after_needed:
                        waiting.append(match)
                matches.append(match)
                if len(matches) >= max_matches:
                    truncated = True
                    break
            newlines = text.count("\n")
            searched_to = first_line + newlines - (1 if text.endswith("\n") else 0)
            if context:
                # The buffer's last lines: before-context for a match early in the next one.
                if text.endswith("\n"):
                    tail.extend(_lines_backward(text, len(text), first_line + newlines, context))
                else:
                    tail.extend(
                        _lines_backward(text, len(text) + 1, first_line + newlines + 1, context)
                    )
    except TimeoutError:
        raise _grep_timeout(limit) from None
    found = [m.to_dict() for m in matches]
    return {
        "ref": output.ref,
        "pattern": pattern,
        "ignore_case": ignore_case,
        "context": context,
        "matches": found,
        "match_count": len(matches),
        "truncated": truncated,
        "searched_lines": min(searched_to, output.line_count),
        "total_lines": output.line_count,
        "text": grep_text(found),
    }


def grep_text(matches: Sequence[dict[str, Any]]) -> str:
    """grep -n style: ``N:match``, ``N-context``, groups separated by ``--``."""
    out: list[str] = []
    printed = 0
    for m in matches:
        group = [(b["line"], "-", b["text"]) for b in m["before"]]
        group.append((m["line"], ":", m["text"]))
        group.extend((a["line"], "-", a["text"]) for a in m["after"])
        fresh = [g for g in group if g[0] > printed]
        if not fresh:
            continue
        if out and fresh[0][0] > printed + 1:
            out.append("--")
        out.extend(f"{n}{sep}{text}" for n, sep, text in fresh)
        printed = fresh[-1][0]
    return "\n".join(out)


def _grep_timeout(limit: float) -> ValidationFailed:
    return ValidationFailed(
        f"The search exceeded its time limit of {limit:g} s (the pattern may backtrack "
        "catastrophically); use a simpler or more specific pattern",
        details={"field": "pattern", "reason": "timeout", "time_limit_seconds": limit},
    )


# --- views for messages ----------------------------------------------------------------


# Outputs up to this size posted inside a message are written in the append's
# own transaction (under the session lock: one commit for the whole append);
# bigger ones are written before the lock, so the lock is never held for the
# seconds a 30 MB write takes.
DEFER_BYTES = 1024 * 1024


@dataclass(slots=True)
class PendingOutput:
    """A small output ready to insert under the append lock (see DEFER_BYTES)."""

    output: ToolOutput  # unsaved, with its provisional ref
    chunks: list[ToolOutputChunk]


@dataclass(slots=True)
class MessageOutput:
    """What a tool message carries once its output is stored (or about to be)."""

    output: ToolOutput
    view: View
    # The full text when the view is the whole output and the message came
    # with a ref instead of content (a raw upload): it becomes the content.
    content: str | None = None
    pending: PendingOutput | None = None


def _pending_output(
    session: Session, data: bytes, sha256: str, tool_name: str, chunk_bytes: int = CHUNK_BYTES
) -> PendingOutput:
    chunker = _Chunker(chunk_bytes)
    chunks: list[ToolOutputChunk] = []
    view = memoryview(data)
    for start in range(0, len(data), READ_PIECE):  # bounded copies of a large output
        chunks.extend(chunker.feed(bytes(view[start : start + READ_PIECE])))
    chunks.extend(chunker.finish())
    output = ToolOutput(
        ref=new_ref(),
        session=session,
        tool_name=tool_name or "",
        byte_size=len(data),
        line_count=chunker.line_count,
        chunk_count=len(chunks),
        sha256=sha256,
        source="message",
    )
    return PendingOutput(output=output, chunks=chunks)


def output_for_message(
    *,
    session: Session,
    config: ViewConfig,
    text: str | None = None,
    output_ref: str | None = None,
    tool_name: str = "",
    field_name: str = "output_ref",
    pending: dict[str, PendingOutput] | None = None,
) -> MessageOutput:
    """spec 000 §1.5: store the full output (or resolve ``output_ref``), make its view.

    With ``pending`` (a dict shared by one batch), an output of at most
    DEFER_BYTES is not written here but handed to ``save_pending_outputs``,
    which runs in the append transaction; identical outputs in one batch share
    one pending output.
    """
    if output_ref:
        output = output_for_session(session=session, ref=output_ref, field_name=field_name)
        info = output_info(output, tool_name)
        view = make_view(output_line_heads(output, max_chars=config.max_line_length), info, config)
        content = None
        if view.is_full:
            content = output_read_all(output).decode("utf-8", errors="replace")
        return MessageOutput(output=output, view=view, content=content)
    text = text or ""
    data = text.encode("utf-8", errors="surrogatepass")
    later = None
    if pending is not None and len(data) <= DEFER_BYTES:
        sha256 = hashlib.sha256(data).hexdigest()
        later = pending.get(sha256)
        if later is None:
            later = pending[sha256] = _pending_output(session, data, sha256, tool_name)
        output = later.output
    else:
        output, _ = output_store_bytes(session=session, data=data, tool_name=tool_name)
    info = output_info(output, tool_name)
    view = make_view(iter_text_lines(text, config.max_line_length + 1), info, config)
    return MessageOutput(output=output, view=view, pending=later)


def save_pending_outputs(session: Session, prepared: Sequence[Any]) -> None:
    """Insert a batch's small outputs, inside the append transaction (session locked).

    One ``INSERT … ON CONFLICT DO NOTHING RETURNING`` writes the new outputs:
    this path is on every tool result, and each round trip counts. An output
    the session already has (same sha256) is reused instead: its row is locked
    (a concurrent GC has either deleted it already or waits) and touched, and
    the message's ref — in the row and in its view — switches to it. Rows of
    ``prepared`` are updated in place.
    """
    todo: dict[str, PendingOutput] = {}
    for p in prepared:
        if getattr(p, "pending", None) is not None:
            todo[p.pending.output.sha256] = p.pending
    if not todo:
        return
    existing: dict[str, ToolOutput] = {}
    for _ in range(3):
        pendings = list(todo.values())
        with_chunks = connection.vendor == "postgresql" and (
            sum(p.output.byte_size for p in pendings) <= CHUNK_BYTES * INSERT_BATCH
        )
        inserted = _insert_outputs(session, pendings, with_chunks=with_chunks)
        chunks = []
        for sha, pk in inserted.items():
            todo[sha].output.pk = pk
            for chunk in todo[sha].chunks:
                chunk.output_id = pk
            chunks.extend(todo[sha].chunks)
        if chunks and not with_chunks:
            ToolOutputChunk.objects.bulk_create(chunks, batch_size=INSERT_BATCH)
        conflicted = [sha for sha in todo if sha not in inserted]
        if not conflicted:
            break
        found = {
            o.sha256: o
            for o in ToolOutput.objects.select_for_update()
            .filter(session=session, sha256__in=conflicted)
            .order_by("pk")
        }
        if found:
            ToolOutput.objects.filter(pk__in=[o.pk for o in found.values()]).update(
                last_used_at=timezone.now()
            )
            existing.update(found)
        # What conflicted but is gone now was collected meanwhile: insert it again.
        todo = {sha: todo[sha] for sha in conflicted if sha not in found}
        if not todo:
            break
    else:
        raise Conflict("Could not store the tool outputs (concurrent deletion); retry")
    if existing:
        _switch_refs(session, prepared, existing)


_OUTPUT_COLUMNS = (
    "ref", "session_id", "tool_name", "byte_size", "line_count", "chunk_count", "sha256",
    "source", "created_at", "last_used_at",
)  # fmt: skip


def _insert_outputs(
    session: Session, pendings: Sequence[PendingOutput], *, with_chunks: bool = False
) -> dict[str, int]:
    """INSERT the outputs, skipping shas the session has; → {sha256: id} of those inserted.

    Plain SQL that PostgreSQL and SQLite (≥ 3.35) both run: the ORM has no
    "insert unless it exists, and tell me the ids" in one statement. With
    ``with_chunks`` (PostgreSQL) the chunks of the inserted outputs go in the
    same statement through data-modifying CTEs: one round trip in all.
    """
    qn = connection.ops.quote_name
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    row = "(" + ", ".join(["%s"] * len(_OUTPUT_COLUMNS)) + ")"
    params: list[Any] = []
    for p in pendings:
        o = p.output
        params += [o.ref, session.pk, o.tool_name, o.byte_size, o.line_count, o.chunk_count]
        params += [o.sha256, o.source, now, now]
    insert = (
        f"INSERT INTO {qn(ToolOutput._meta.db_table)} "
        f"({', '.join(qn(c) for c in _OUTPUT_COLUMNS)}) VALUES {', '.join([row] * len(pendings))} "
        f"ON CONFLICT ({qn('session_id')}, {qn('sha256')}) DO NOTHING "
        f"RETURNING {qn('id')}, {qn('sha256')}"
    )
    chunk_rows = [(p.output.sha256, c) for p in pendings for c in p.chunks]
    if with_chunks and chunk_rows:
        values = ", ".join(["(%s, %s::integer, %s::bigint, %s::integer, %s::bigint, %s::bytea)"]
                           * len(chunk_rows))  # fmt: skip
        for sha, c in chunk_rows:
            params += [sha, c.index, c.first_line, c.line_count, c.byte_offset, c.data]
        sql = (
            f"WITH o AS ({insert}), c AS ("
            f"INSERT INTO {qn(ToolOutputChunk._meta.db_table)} "
            f"({qn('output_id')}, {qn('index')}, {qn('first_line')}, {qn('line_count')}, "
            f"{qn('byte_offset')}, {qn('data')}) "
            f"SELECT o.id, v.i, v.f, v.n, v.b, v.d FROM o "
            f"JOIN (VALUES {values}) AS v(sha, i, f, n, b, d) ON v.sha = o.sha256"
            f") SELECT id, sha256 FROM o"
        )
    else:
        sql = insert
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {sha: pk for pk, sha in cursor.fetchall()}


def _switch_refs(
    session: Session, prepared: Sequence[Any], existing: dict[str, ToolOutput]
) -> None:
    from . import accounting

    tokenizer = accounting.tokenizer_of(session)
    config = accounting.estimate_config_of(session)
    for p in prepared:
        pending = getattr(p, "pending", None)
        if pending is None or pending.output.sha256 not in existing:
            continue
        old, output = pending.output.ref, existing[pending.output.sha256]
        msg = p.message
        msg.output_ref = output.ref
        p.row["output_ref"] = output.ref
        if msg.view is not None and old in msg.view:
            msg.view = msg.view.replace(old, output.ref)
            p.row["view"] = msg.view
            p.row["token_count"] = msg.token_count = estimate_message(msg, tokenizer, config)
        p.ref = ref_dict(output)
        p.info = output_info(output, msg.name)
        p.pending = None


# --- GC ----------------------------------------------------------------------------------


def live_message_refs(outputs: Sequence[ToolOutput]) -> Iterable[str]:
    """Refs a message in its session's live window carries (its view may be a placeholder)."""
    return Message.objects.filter(
        output_ref__in=[o.ref for o in outputs], seq__gte=F("session__window_start_seq")
    ).values_list("output_ref", flat=True)


def retained_text_refs(outputs: Sequence[ToolOutput]) -> Iterable[str]:
    """Refs named in a session's retain or summary (spec 000 §2.6.4 lists refs to keep)."""
    by_session: dict[int, list[str]] = {}
    for o in outputs:
        by_session.setdefault(o.session_id, []).append(o.ref)
    found: set[str] = set()
    rows = Session.objects.filter(pk__in=by_session).values_list("pk", "retain", "summary")
    for pk, retain, summary in rows:
        text = f"{retain}\n{summary}"
        found.update(ref for ref in by_session[pk] if ref in text)
    return found


def output_referenced_refs(outputs: Sequence[ToolOutput]) -> set[str]:
    referenced: set[str] = set()
    if not outputs:
        return referenced
    for check in REGISTRY.reference_checks:
        referenced.update(check(outputs))
    return referenced


def outputs_gc(
    *,
    older_than_days: int | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    batch_size: int = 200,
) -> dict[str, Any]:
    """spec 000 §1.9: delete outputs nothing references any more.

    A candidate is older than the retention (created and last used before the
    cutoff) and no reference check claims it. Each batch is re-checked under
    row locks before the delete: a message that reuses an output touches
    ``last_used_at`` first (an UPDATE that waits for the lock), so an output
    cannot be deleted under a message that is being appended.
    """
    days = settings.CONTEXTSVC_OUTPUT_RETENTION_DAYS if older_than_days is None else older_than_days
    if days < 0:
        raise ValidationFailed(
            "older_than_days must not be negative", details={"field": "older_than_days"}
        )
    cutoff = (now or timezone.now()) - timedelta(days=days)
    candidates = ToolOutput.objects.filter(
        last_used_at__lt=cutoff, created_at__lt=cutoff, sha256__isnull=False
    ).order_by("pk")
    deleted: list[dict[str, Any]] = []
    kept = 0
    after = 0
    while True:
        batch = list(candidates.filter(pk__gt=after)[:batch_size])
        if not batch:
            break
        after = batch[-1].pk
        referenced = output_referenced_refs(batch)
        victims = [o for o in batch if o.ref not in referenced]
        kept += len(batch) - len(victims)
        if not victims:
            continue
        if dry_run:
            deleted.extend(_gc_row(o) for o in victims)
            continue
        with transaction.atomic():
            locked = list(
                ToolOutput.objects.select_for_update()
                .filter(pk__in=[o.pk for o in victims], last_used_at__lt=cutoff)
                .order_by("pk")
            )
            still = output_referenced_refs(locked)
            gone = [o for o in locked if o.ref not in still]
            kept += len(victims) - len(gone)
            if gone:
                ids = [o.pk for o in gone]
                ToolOutputChunk.objects.filter(output_id__in=ids).delete()
                ToolOutput.objects.filter(pk__in=ids).delete()
                deleted.extend(_gc_row(o) for o in gone)
    return {
        "dry_run": dry_run,
        "cutoff": cutoff.isoformat(),
        "older_than_days": days,
        "count": len(deleted),
        "bytes": sum(d["byte_size"] for d in deleted),
        "kept_referenced": kept,
        "outputs": deleted,
    }


def _gc_row(output: ToolOutput) -> dict[str, Any]:
    return {
        "ref": output.ref,
        "session_id": output.session_id,
        "tool_name": output.tool_name,
        "byte_size": output.byte_size,
        "created_at": output.created_at.isoformat(),
        "last_used_at": output.last_used_at.isoformat(),
    }


# --- the append path: budget trim and tool preflight (inside the session lock) -------------

# Views that still hold (part of) an output, so they count toward the tool
# output budget and may be trimmed. "trimmed", "failed" and "cleared" do not.
TRIMMABLE_STATES = ("full", "cut", "offloaded")
_CANDIDATE_PAGE = 100
_FIELDS = ("pk", "seq", "token_count", "output_ref", "tool_call_id", "name")


def cache_config(session: Session) -> ViewConfig:
    return resolve_view_config((session.policy or {}).get("tool_output_cache"))


def _effective_window(session: Session) -> int:
    from . import accounting

    return accounting.limits_of(session).limit


def session_tool_output_budget(session: Session) -> int:
    return tool_output_budget(
        cache_config(session), session.context_window, _effective_window(session)
    )


def session_recount_tool_outputs(session: Session) -> None:
    """Recompute the cached tool-output counters from the live window.

    The append path does this by itself once the live window has moved (a
    compaction); call it after changing tool views in place (tool clearing).
    The caller holds the session lock and saves the session.
    """
    live = Message.objects.filter(
        session=session, role="tool", seq__gte=session.window_start_seq, output_ref__isnull=False
    )
    total = live.filter(view_state__in=TRIMMABLE_STATES).aggregate(t=Sum("token_count"))["t"]
    newest_trimmed = live.filter(view_state="trimmed").aggregate(s=Max("seq"))["s"]
    session.tool_output_tokens = total or 0
    session.tool_trim_seq = newest_trimmed or 0
    session.tool_count_window_seq = session.window_start_seq


def _stored_candidates(session: Session) -> Iterator[TrimCandidate]:
    """Untrimmed outputs already stored, oldest first, a page at a time.

    Trimming is oldest first, so everything up to ``tool_trim_seq`` is already
    trimmed: the scan starts after it and reads only what gets trimmed now.
    """
    after = max(session.tool_trim_seq, session.window_start_seq - 1)
    while True:
        rows = list(
            Message.objects.filter(
                session=session,
                role="tool",
                seq__gt=after,
                view_state__in=TRIMMABLE_STATES,
                output_ref__isnull=False,
            )
            .order_by("seq")
            .values_list(*_FIELDS)[:_CANDIDATE_PAGE]
        )
        for row in rows:
            yield TrimCandidate(key=("stored", row), tokens=row[2])
        if len(rows) < _CANDIDATE_PAGE:
            return
        after = rows[-1][1]


def _compaction_can_help(session: Session) -> bool:
    return any(check(session) for check in REGISTRY.compaction_available)


@dataclass(slots=True)
class ToolEffects:
    """What the tool-output rules did to one appended batch."""

    trimmed_seqs: list[int] = field(default_factory=list)
    failed_seqs: list[int] = field(default_factory=list)
    # Outputs that would have overflowed the limit while compaction could still
    # make room: shown as trimmed placeholders, and compaction is due now.
    overflow_seqs: list[int] = field(default_factory=list)
    conversation_delta: int = 0  # change to stored rows' tokens (negative: freed)

    @property
    def budget_exceeded(self) -> bool:
        return bool(self.failed_seqs)


def _placeholder_tokens(
    view: str, tool_call_id: str | None, name: str | None, session: Session
) -> int:
    from . import accounting

    msg = EngineMessage(role="tool", view=view, tool_call_id=tool_call_id, name=name)
    return estimate_message(
        msg, accounting.tokenizer_of(session), accounting.estimate_config_of(session)
    )


def _release_reservations(session: Session, prepared: Sequence[Any]) -> None:
    """spec 001: a posted tool result releases its reservation (its own id, else the oldest)."""
    reservations = dict(session.tool_reservations or {})
    if not reservations:
        return
    for p in prepared:
        if p.message.role != "tool":
            continue
        key = p.message.tool_call_id or ""
        if key in reservations:
            reservations.pop(key)
            continue
        anonymous = sorted((k for k in reservations if k.startswith("~")), key=lambda k: int(k[1:]))
        if anonymous:
            reservations.pop(anonymous[0])
    session.tool_reservations = reservations
    session.reserved_tokens = sum(reservations.values())


def apply_tool_outputs(session: Session, prepared: Sequence[Any], first_seq: int) -> ToolEffects:
    """The tool-output rules of one append, run under the session row lock.

    1. Release the reservations of the posted tool results (spec 001).
    2. spec 000 §1.7 trim: if the untrimmed outputs in context now exceed the
       budget, the oldest become placeholders down to (1 − hysteresis) × budget.
       Decided from the cached counter; stored rows are read only when some
       are trimmed, and only those.
    3. spec 001 tool_preflight: a tool result that would push the projection
       past the limit gets the failure view instead (stored in full all the
       same) and the session turns final (toolBudgetExceeded).

    Rows of the batch (``prepared``, seq ``first_seq + i``) are changed in
    place; stored rows are updated here. The session's counters are updated
    on the object; the caller saves it.
    """
    from . import accounting

    effects = ToolEffects()
    if session.tool_count_window_seq != session.window_start_seq:
        session_recount_tool_outputs(session)
    _release_reservations(session, prepared)
    batch = [
        (i, p)
        for i, p in enumerate(prepared)
        if p.message.role == "tool"
        and p.row.get("output_ref")
        and p.row["view_state"] in TRIMMABLE_STATES
    ]
    if not batch:
        return effects
    config = cache_config(session)

    # 2. budget trim
    added = sum(p.row["token_count"] for _, p in batch)
    total = session.tool_output_tokens + added
    budget = tool_output_budget(config, session.context_window, _effective_window(session))
    if total > budget:
        fresh = (TrimCandidate(key=("batch", i), tokens=p.row["token_count"]) for i, p in batch)
        plan = plan_trim(
            total,
            budget,
            itertools.chain(_stored_candidates(session), fresh),
            hysteresis=config.trim_hysteresis,
        )
        stored_updates: list[Message] = []
        for kind, item in plan.trimmed:
            if kind == "stored":
                pk, seq, tokens, ref, call_id, name = item
                view = trimmed_view(ref)
                new_tokens = _placeholder_tokens(view, call_id, name, session)
                stored_updates.append(
                    Message(pk=pk, view=view, view_state="trimmed", token_count=new_tokens)
                )
                effects.conversation_delta += new_tokens - tokens
                session.tool_output_tokens -= tokens
                effects.trimmed_seqs.append(seq)
            else:
                p = prepared[item]
                view = trimmed_view(p.row["output_ref"])
                p.row.update(
                    view=view,
                    view_state="trimmed",
                    token_count=_placeholder_tokens(
                        view, p.row["tool_call_id"], p.row["name"], session
                    ),
                )
                effects.trimmed_seqs.append(first_seq + item)
        if stored_updates:
            Message.objects.bulk_update(stored_updates, ["view", "view_state", "token_count"])
        if effects.trimmed_seqs:
            session.tool_trim_seq = max(session.tool_trim_seq, max(effects.trimmed_seqs))
        session.conversation_tokens = max(
            0, session.conversation_tokens + effects.conversation_delta
        )

    # 3. tool preflight, message by message in batch order
    base = session.conversation_tokens
    running = 0
    for i, p in enumerate(prepared):
        tokens = p.row["token_count"]
        row = p.row
        if p.message.role == "tool" and row.get("output_ref") and row["view_state"] != "trimmed":
            over = session.tool_budget_exceeded
            if not over:
                session.conversation_tokens = base + running + tokens
                over = accounting.compute_budget(session).guard.status == "final"
                if over and _compaction_can_help(session):
                    # With compaction available, ending the session would throw
                    # away a run that a summary can save: the output becomes a
                    # trimmed placeholder (spec 000 §1.7, stored in full,
                    # expandable) and the caller asks for compaction at once.
                    # spec 001's final stays for when compaction cannot help.
                    view = trimmed_view(row["output_ref"])
                    tokens = _placeholder_tokens(view, row["tool_call_id"], row["name"], session)
                    row.update(view=view, view_state="trimmed", token_count=tokens)
                    effects.overflow_seqs.append(first_seq + i)
                    effects.trimmed_seqs.append(first_seq + i)
                    running += tokens
                    continue
            if over:
                info = p.info
                view = (
                    failed_view(info)
                    if info is not None
                    else failed_view(OutputInfo(ref=row["output_ref"], byte_size=0, line_count=0))
                )
                tokens = _placeholder_tokens(view, row["tool_call_id"], row["name"], session)
                row.update(
                    view=view, view_state="failed", token_count=tokens, content="", parts=None
                )
                effects.failed_seqs.append(first_seq + i)
                session.tool_budget_exceeded = True
            elif row["view_state"] in TRIMMABLE_STATES:
                session.tool_output_tokens += tokens
        running += tokens
    session.conversation_tokens = base
    return effects


# --- tool budget: preview / reserve / release (spec 001) ------------------------------------


def tool_output_cost(
    session: Session,
    *,
    bytes: int | None = None,
    tokens: int | None = None,
    text: str | None = None,
) -> dict[str, int]:
    """Tokens a tool output will take in context: its view, not the blob.

    ``text`` is cut and tokenized exactly; ``bytes`` and ``tokens`` go through
    the same cut as an estimate (bytes/4, DESIGN.md), so a 200 MB output
    reserves what its 50 KiB view costs.
    """
    from . import accounting

    config = cache_config(session)
    overhead = accounting.estimate_config_of(session).per_message_overhead
    tokenizer = accounting.tokenizer_of(session)
    if text is not None:
        raw_bytes = len(text.encode("utf-8", errors="surrogatepass"))
        if config.enabled:
            info = OutputInfo(
                ref="out_" + "x" * 24, byte_size=raw_bytes, line_count=count_lines(text)
            )
            view = make_view(iter_text_lines(text, config.max_line_length + 1), info, config)
            shown = text if view.is_full else view.text or ""
        else:
            shown = text
        return {
            "tokens": estimate_text(shown, tokenizer) + overhead,
            "raw_tokens": -(-raw_bytes // 4),
            "bytes": raw_bytes,
        }
    if bytes is not None:
        view_bytes = view_bytes_estimate(bytes, config)
        return {
            "tokens": -(-view_bytes // 4) + overhead,
            "raw_tokens": -(-bytes // 4),
            "bytes": bytes,
        }
    if tokens is not None:
        cap = -(-view_bytes_estimate(tokens * 4, config) // 4)
        return {"tokens": min(tokens, cap) + overhead, "raw_tokens": tokens, "bytes": tokens * 4}
    raise ValidationFailed("Give one of bytes, tokens or text", details={"field": "bytes"})


def _can_execute(session: Session) -> bool:
    return not session.tool_budget_exceeded and session.status != Session.Status.FINAL


def tool_output_preview(session: Session, **cost: Any) -> dict[str, Any]:
    """spec 001 previewToolOutput: the cost and whether it fits, reserving nothing."""
    from . import accounting

    tool_call_id = cost.pop("tool_call_id", None)
    price = tool_output_cost(session, **cost)
    replaced = int((session.tool_reservations or {}).get(tool_call_id or "", 0))
    state = accounting.compute_budget(session, extra=max(0, price["tokens"] - replaced))
    fits = state.guard.status != "final"
    return {
        **price,
        "fits": fits,
        "can_execute": _can_execute(session) and fits,
        "projected": state.guard.projected,
        "limit": state.guard.limit,
        "reserved_tokens": session.reserved_tokens,
        "tool_budget_exceeded": session.tool_budget_exceeded,
    }


@transaction.atomic
def session_reserve_tool_output(
    *, session: Session, tool_call_id: str | None = None, **cost: Any
) -> dict[str, Any]:
    """spec 001 reserveToolOutput: hold the output's tokens as the guard's pending.

    A reservation that does not fit is refused and sets toolBudgetExceeded:
    the session turns final and canExecuteTool answers false from then on.
    """
    from . import accounting

    session = hotpath.lock_session(session.pk)
    price = tool_output_cost(session, **cost)
    reservations = dict(session.tool_reservations or {})
    key = tool_call_id
    if key is None:
        numbers = [int(k[1:]) for k in reservations if k.startswith("~")]
        key = f"~{max(numbers, default=0) + 1}"
    ok = _can_execute(session)
    reason = None if ok else "toolBudgetExceeded" if session.tool_budget_exceeded else "final"
    if ok:
        previous = reservations.pop(key, 0)
        session.reserved_tokens = sum(reservations.values())
        state = accounting.compute_budget(session, extra=price["tokens"])
        if state.guard.status == "final":
            ok, reason = False, "toolBudgetExceeded"
            if previous:
                reservations[key] = previous
            session.tool_budget_exceeded = True
            status.session_mark_final(session=session, reason="toolBudgetExceeded")
        else:
            reservations[key] = price["tokens"]
    session.tool_reservations = reservations
    session.reserved_tokens = sum(reservations.values())
    state = status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save(
        update_fields=[
            "tool_reservations",
            "reserved_tokens",
            "tool_budget_exceeded",
            "guard_status",
            "used_tokens",
            "updated_at",
        ]
    )
    return {
        "ok": ok,
        "reason": reason,
        "tool_call_id": tool_call_id,
        "reservation": key if ok else None,
        **price,
        "reserved_tokens": session.reserved_tokens,
        "can_execute": _can_execute(session),
        "tool_budget_exceeded": session.tool_budget_exceeded,
        "budget": state.to_dict(),
    }


@transaction.atomic
def session_release_tool_reservation(
    *, session: Session, tool_call_id: str | None = None
) -> dict[str, Any]:
    """Drop one reservation (by tool_call_id or reservation key), or all of them."""

    session = hotpath.lock_session(session.pk)
    reservations = dict(session.tool_reservations or {})
    released = 0
    if tool_call_id is None:
        released = sum(reservations.values())
        reservations = {}
    elif tool_call_id in reservations:
        released = reservations.pop(tool_call_id)
    session.tool_reservations = reservations
    session.reserved_tokens = sum(reservations.values())
    state = status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save(
        update_fields=[
            "tool_reservations",
            "reserved_tokens",
            "guard_status",
            "used_tokens",
            "updated_at",
        ]
    )
    return {
        "released_tokens": released,
        "reserved_tokens": session.reserved_tokens,
        "can_execute": _can_execute(session),
        "budget": state.to_dict(),
    }
