"""The whole transcript, read back: pages of it, and the export streamed in chunks.

Every message ever posted, in seq order, whatever became of it: live, kept as
the sandwich's head, compacted (before the live window: summarised away, the
row kept), or retracted. One serializer (``_item``) makes both the API's pages
(``GET /sessions/{sid}/messages``) and the export's lines (``GET
/sessions/{sid}/export``, the dashboard's download), so a downloaded transcript
is the listing, line for line.

Reads are seq ranges of the (session, seq) index: seqs are contiguous from 1
(the transcript is append-only), so a page or a chunk reads its rows and no
other, whatever the session's size, and the export holds one chunk at a time.
The JSON columns are read as text and passed through as JSON fragments: no
parse and re-serialise per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from django.db.models import TextField
from django.db.models.functions import Cast

from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import ToolCall
from contextsvc.engine.native_export import NativeTranscript
from contextsvc.http import dumps

from . import accounting
from .extensions import CLIENT_COMPACTION, REGISTRY
from .live import in_live_window
from .models import Message, Session
from .selectors import json_text

# Messages per read of the export, held one chunk at a time: ~300 KB of agent text
# (chunks of 500 measured several times the peak memory for no more throughput:
# bench_export).
EXPORT_CHUNK = 200

_FIELDS = (
    "seq",
    "role",
    "content",
    "_parts",
    "_calls",
    "tool_call_id",
    "name",
    "reasoning",
    "output_ref",
    "view",
    "view_state",
    "pinned",
    "token_count",
    "token_count_estimated",
    "created_at",
    "retracted_at",
)

STATES = ("live", "head", "compacted", "retracted")


def message_state(seq: int, retracted: bool, window_start_seq: int, head_end_seq: int) -> str:
    """live, head (a sandwich kept it live before the summary), compacted, or retracted."""
    if retracted:
        return "retracted"
    if seq >= window_start_seq:
        return "live"
    if in_live_window(seq, window_start_seq, head_end_seq):
        return "head"
    return "compacted"


def client_compaction_markers(session: Session) -> frozenset[int]:
    """Seqs of the marker messages written where a client compacted or edited its own
    history (the proxy's, through ``REGISTRY.window_events``)."""
    return frozenset(
        event.after_seq
        for source in REGISTRY.window_events
        for event in source(session)
        if event.kind == CLIENT_COMPACTION
    )


def _rows(session: Session, *, after_seq: int, through_seq: int) -> list[tuple]:
    return list(
        Message.objects.filter(session=session, seq__gt=after_seq, seq__lte=through_seq)
        .order_by("seq")
        .annotate(_parts=Cast("parts", TextField()), _calls=Cast("tool_calls", TextField()))
        .values_list(*_FIELDS)
    )


class _Reader:
    """What a row needs besides itself: the session's window and its markers, read once."""

    def __init__(self, session: Session) -> None:
        self.window_start_seq = session.window_start_seq
        self.head_end_seq = session.head_end_seq
        self.markers = client_compaction_markers(session)

    def item(self, row: tuple) -> dict[str, Any]:
        """One message as the listing and the JSONL export show it."""
        (
            seq,
            role,
            content,
            parts,
            calls,
            tool_call_id,
            name,
            reasoning,
            output_ref,
            view,
            view_state,
            pinned,
            token_count,
            estimated,
            created_at,
            retracted_at,
        ) = row
        retracted = retracted_at is not None
        return {
            "seq": seq,
            "role": role,
            "state": message_state(seq, retracted, self.window_start_seq, self.head_end_seq),
            "pinned": pinned,
            "client_compaction_marker": seq in self.markers,
            "created_at": created_at,
            "retracted_at": retracted_at,
            "token_count": token_count,
            "token_count_estimated": estimated,
            "content": orjson.Fragment(parts) if parts is not None else content,
            "content_in_output": _in_output(content, output_ref, view),
            "output_ref": output_ref,
            "view": view,
            "view_state": view_state,
            "tool_calls": orjson.Fragment(calls or "[]"),
            "tool_call_id": tool_call_id,
            "name": name,
            "reasoning": reasoning,
        }


def _in_output(content: str, output_ref: str | None, view: str | None) -> bool:
    """The text lives in the stored output alone (a tool output too big for its
    message: the row keeps the view; ``GET /refs/{ref}`` reads the rest)."""
    return bool(output_ref) and view is not None and not content


def transcript_page(
    session: Session, *, after_seq: int, limit: int
) -> tuple[list[dict[str, Any]], int | None]:
    """Messages after ``after_seq``, at most ``limit``; → (items, seq to go on after, or None)."""
    rows = _rows(session, after_seq=after_seq, through_seq=after_seq + limit + 1)
    reader = _Reader(session)
    items = [reader.item(r) for r in rows[:limit]]
    return items, (items[-1]["seq"] if len(rows) > limit else None)


def _chunks(session: Session, chunk: int) -> Iterator[list[tuple]]:
    """The transcript up to the last message at the start, ``chunk`` messages at a time."""
    through = session.last_seq  # appends during the export are not part of it
    after = 0
    while after < through:
        upper = min(after + chunk, through)
        rows = _rows(session, after_seq=after, through_seq=upper)
        if rows:
            yield rows
        after = upper


def transcript_lines(session: Session, *, chunk: int = EXPORT_CHUNK) -> Iterator[bytes]:
    """The transcript as JSONL: one ``_Reader.item`` per line, a chunk per yield."""
    reader = _Reader(session)
    for rows in _chunks(session, chunk):
        yield b"".join(orjson.dumps(reader.item(r), option=orjson.OPT_APPEND_NEWLINE) for r in rows)


def _engine_message(row: tuple) -> EngineMessage:
    """A transcript row as the provider converters read it: the content as posted
    (the view only where the text lives in the stored output alone)."""
    seq, role, content, parts, calls, tool_call_id, name, reasoning, output_ref, view = row[:10]
    in_output = _in_output(content, output_ref, view)
    return EngineMessage(
        role=role,
        content=json_text(parts) if parts is not None else content,
        tool_calls=tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c.get("arguments") or {})
            for c in json_text(calls) or ()
        ),
        tool_call_id=tool_call_id,
        name=name,
        reasoning=reasoning,
        output_ref=output_ref,
        view=view if in_output else None,
        view_state=row[10] if in_output else "full",
        seq=seq,
    )


def takes_mid_system(session: Session) -> bool:
    """Whether the session's model takes a ``system`` message inside ``messages``
    (its model profile; an unknown model is assumed to, like the newest ones)."""
    provider = session.provider or accounting.infer_provider(session.model)
    model_row, provider_row = accounting.profile_rows(provider, session.model)
    row = model_row or provider_row
    return True if row is None else row.mid_system_messages


def native_lines(session: Session, fmt: str, *, chunk: int = EXPORT_CHUNK) -> Iterator[bytes]:
    """The transcript as JSONL of ``fmt``'s native messages (``engine.native_export``):
    every message but the retracted ones, in seq order."""
    export = NativeTranscript(fmt, mid_system=takes_mid_system(session))
    retracted_at = _FIELDS.index("retracted_at")
    for rows in _chunks(session, chunk):
        messages = [_engine_message(r) for r in rows if r[retracted_at] is None]
        if out := export.feed(messages):
            yield b"".join(dumps(m) + b"\n" for m in out)
    if out := export.finish():
        yield b"".join(dumps(m) + b"\n" for m in out)
