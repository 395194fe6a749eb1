"""Reading stored outputs: chunk iteration, raw lines, slices, line heads
(docs/concepts/trimming.md#reading-refs).

A slice finds its first line with one indexed lookup (every chunk knows the
number of the line holding its first byte) and reads one or two chunks,
wherever the range is in a 200 MB output.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.line_paging import take_chars
from contextsvc.errors import ValidationFailed

from ..models import ToolOutput, ToolOutputChunk

CUT_MARK = " […line cut]"
# Lines a read returns when the caller asks for none in particular (``limit`` 0).
DEFAULT_SLICE_LINES = 100


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


def iter_chunks(
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
        first = next(iter_chunks(output.pk, 0), None)
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


def _open_at(output: ToolOutput, line: int) -> tuple[bytes, int, Iterator[_Chunk]] | None:
    """Where line ``line`` starts: its chunk's data, the position in it, and the
    chunks after it (read lazily, as the line goes on)."""
    located = _locate(output, line)
    if located is None:
        return None
    index, pos, data = located
    return data, pos, iter_chunks(output.pk, index + 1)


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
    opened = _open_at(output, start_line)
    if opened is None:
        return
    data, pos, chunks = opened
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
            opened = _open_at(output, number)
            if opened is None:
                return
            data, pos, chunks = opened
            continue
        following = next(chunks, None)
        if following is None:
            if parts and (have or number <= output.line_count):
                yield RawLine(number, b"".join(parts), False)
            return
        data, pos = following.data, 0


def iter_line_bytes(output: ToolOutput, line: int) -> Iterator[bytes]:
    """The bytes of line ``line`` (without its newline), chunk by chunk, never whole."""
    if output.byte_size == 0 or not 1 <= line <= output.line_count:
        return
    opened = _open_at(output, line)
    if opened is None:
        return
    data, pos, chunks = opened
    while True:
        nl = data.find(b"\n", pos)
        if nl != -1:
            yield data[pos:nl]
            return
        yield data[pos:]
        following = next(chunks, None)
        if following is None:
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
    return b"".join(c.data for c in iter_chunks(output.pk, 0, max_batch=16))


def output_iter_bytes(output: ToolOutput) -> Iterator[bytes]:
    """The blob chunk by chunk (a download streams this)."""
    for chunk in iter_chunks(output.pk, 0, max_batch=4):
        yield chunk.data


def output_slice(
    output: ToolOutput,
    *,
    offset: int = 1,
    limit: int = DEFAULT_SLICE_LINES,
    max_line_length: int | None = None,
    max_bytes: int | None = None,
    json_bytes: bool = False,
    char_offset: int = 0,
) -> dict[str, Any]:
    """docs/concepts/trimming.md#reading-refs: lines ``offset`` … ``offset + limit - 1``, numbered
    like a ``read`` tool.

    ``offset`` is the 1-based first line (0 reads from the start). Past the end
    the slice is empty, not an error. The text is capped at ``max_bytes``
    (a slice stops early with ``has_more``); ``max_line_length`` cuts each line.
    ``json_bytes``: the cap counts the text as it will be sent in JSON (with
    its escapes), so an answer of escaped characters fits in one read.

    ``limit`` 0 means the default (100 lines), as an omitted one does.
    ``char_offset`` pages inside a line (``engine.line_paging``): the first
    line is shown from that character on (0-based). When the last line shown
    is cut, ``continue_line`` is the read that goes on inside it
    (``{"offset": line, "char_offset": …}``); ``next_offset`` still names
    the next line, so a caller that ignores it never loops on one line.
    """
    if limit < 0:
        raise ValidationFailed(
            "limit must be a positive number of lines (0: the default)", details={"field": "limit"}
        )
    if offset < 0:
        raise ValidationFailed("offset must be a 1-based line number", details={"field": "offset"})
    if char_offset < 0:
        raise ValidationFailed(
            "char_offset must be a 0-based character position", details={"field": "char_offset"}
        )
    limit = limit or DEFAULT_SLICE_LINES
    cap = settings.CONTEXTSVC_SLICE_MAX_BYTES if max_bytes is None else max_bytes
    start = max(offset, 1)
    per_line = 4 * (max_line_length + 1) if max_line_length else cap
    entries: list[str] = []
    cut_lines: list[int] = []
    size = 0
    last = start - 1
    truncated = False
    continue_line: dict[str, int] | None = None

    def measure(entry: str) -> int:
        # + 1: the newline joining entries (two bytes, "\n", in JSON).
        return len(orjson.dumps(entry)) if json_bytes else len(entry.encode("utf-8")) + 1

    lines_from = start
    if char_offset and start <= output.line_count:
        try:
            piece = take_chars(
                iter_line_bytes(output, start),
                char_offset=char_offset,
                max_chars=max_line_length or cap,
            )
        except EngineValidationError as exc:
            raise ValidationFailed(exc.message, details={"field": exc.field}) from None
        cut = piece.next_char_offset is not None
        entry = f"{start:>6}\t{piece.text}{CUT_MARK if cut else ''}"
        entries.append(entry)
        size += measure(entry)
        if cut:
            cut_lines.append(start)
            continue_line = {"offset": start, "char_offset": piece.next_char_offset}
        last = start
        lines_from = start + 1
    rest = limit - len(entries)
    for raw in iter_raw_lines(output, lines_from, max_line_bytes=per_line) if rest else ():
        text, cut = _decode(raw, max_line_length)
        entry = f"{raw.number:>6}\t{text}{CUT_MARK if cut else ''}"
        entry_size = measure(entry)
        if entries and size + entry_size > cap:
            truncated = True
            break
        entries.append(entry)
        size += entry_size
        continue_line = None
        if cut:
            cut_lines.append(raw.number)
            continue_line = {"offset": raw.number, "char_offset": len(text)}
        last = raw.number
        if len(entries) >= limit:
            break
    has_more = last < output.line_count or continue_line is not None
    return {
        "ref": output.ref,
        "tool_name": output.tool_name,
        "offset": start,
        "limit": limit,
        "lines": len(entries),
        "total_lines": output.line_count,
        "byte_size": output.byte_size,
        "has_more": has_more,
        "next_offset": last + 1 if last < output.line_count else None,
        "truncated": truncated,
        "cut_lines": cut_lines,
        "char_offset": char_offset,
        "continue_line": continue_line,
        "text": "\n".join(entries),
    }
