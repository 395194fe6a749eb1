"""Tool outputs posted with an append: store them, make their views, insert them under the lock.

docs/concepts/trimming.md#stored-in-full: a tool result is stored in full and the message carries a
view of it. Small outputs wait for the append's own transaction
(``save_pending_outputs``); big ones are stored before the session lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from django.db import connection
from django.utils import timezone

from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.output_fit import capped_view
from contextsvc.engine.output_views import (
    OutputInfo,
    View,
    ViewConfig,
    iter_text_lines,
    make_view,
)
from contextsvc.engine.tokens import estimate_message
from contextsvc.errors import Conflict

from .. import accounting
from ..models import Session, ToolOutput, ToolOutputChunk
from .read import output_line_heads, output_read_all
from .store import (
    CHUNK_BYTES,
    INSERT_BATCH,
    PendingOutput,
    output_info,
    output_store_bytes,
    output_touch,
    pending_output,
    ref_dict,
)

# Outputs up to this size posted inside a message are written in the append's
# own transaction (under the session lock: one commit for the whole append);
# bigger ones are written before the lock, so the lock is never held for the
# seconds a 30 MB write takes.
DEFER_BYTES = 1024 * 1024


class PreparedMessage(Protocol):
    """A message of an append batch, made ready before the lock (the append's row)."""

    message: EngineMessage
    row: dict[str, Any]  # the columns to insert
    ref: dict[str, Any] | None  # docs/concepts/trimming.md#output-ref of a tool result
    info: OutputInfo | None  # for a failure view decided under the lock
    pending: PendingOutput | None  # a small output to insert under the lock


@dataclass(slots=True)
class MessageOutput:
    """What a tool message carries once its output is stored (or about to be)."""

    output: ToolOutput
    view: View
    # The full text when the view is the whole output and the message came
    # with a ref instead of content (a raw upload): it becomes the content.
    content: str | None = None
    pending: PendingOutput | None = None


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
    """docs/concepts/trimming.md#stored-in-full: store the full output (or resolve ``output_ref``),
    make its view.

    With ``pending`` (a dict shared by one batch), an output of at most
    DEFER_BYTES is not written here but handed to ``save_pending_outputs``,
    which runs in the append transaction; identical outputs in one batch share
    one pending output.
    """
    if output_ref:
        output = output_touch(session=session, ref=output_ref, field_name=field_name)
        info = output_info(output, tool_name)
        if config.view_tokens is not None and config.style == "cut":
            # Only the head of an uploaded output is read here: the cap cuts it head-only.
            limit = min(config.max_message_bytes, 4 * config.view_tokens)
            config = replace(config, max_message_bytes=max(limit, 1))
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
            later = pending[sha256] = pending_output(session, data, sha256, tool_name)
        output = later.output
    else:
        output, _ = output_store_bytes(session=session, data=data, tool_name=tool_name)
    info = output_info(output, tool_name)
    view = make_view(iter_text_lines(text, config.max_line_length + 1), info, config)
    view = capped_view(view, text, info, config)
    return MessageOutput(output=output, view=view, pending=later)


def save_pending_outputs(session: Session, prepared: Sequence[PreparedMessage]) -> None:
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
    session: Session, prepared: Sequence[PreparedMessage], existing: dict[str, ToolOutput]
) -> None:
    """Point the messages whose bytes the session already had at that output instead.

    The ref changes in the row and in the view, whose tokens are counted again
    (another ref's characters may tokenize differently).
    """
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
