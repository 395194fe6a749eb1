"""Writing the recall index: a session's messages, their outputs and its summaries, as segments.

Off the append path: an append writes nothing here. ``recall_catch_up``
indexes what a session appended since ``RecallState.indexed_seq``, in
message order; a search, a compaction and the periodic sweep call it, so the
index is current wherever it is read. An output is indexed once, with the
first message that carried it (identical outputs are stored once).
"""

from __future__ import annotations

import codecs
import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from contextsvc import nul
from contextsvc.celery import app as celery_app
from contextsvc.engine.recall_segments import split_segments

from ..extensions import REGISTRY
from ..models import Message, RecallSegment, RecallState, Session, ToolOutput
from ..outputs.read import iter_chunks

logger = logging.getLogger(__name__)

INDEX_TASK = "sessions.recall_index_session"
MESSAGES_PER_BATCH = 200
INSERT_BATCH = 500
_MESSAGE_FIELDS = ("seq", "role", "content", "tool_calls", "name", "output_ref")


@dataclass(frozen=True, slots=True)
class CatchUp:
    indexed_seq: int  # the session's messages up to here are in the index
    last_seq: int  # the session's last message when it ran
    segments: int  # written by this call

    @property
    def complete(self) -> bool:
        return self.indexed_seq >= self.last_seq


def recall_catch_up(session_pk: int, *, max_bytes: int | None = None) -> CatchUp:
    """Index the session's messages after ``indexed_seq`` (and the outputs they carry first).

    One transaction; the state row is locked, so two callers never index the
    same messages twice. With ``max_bytes`` it stops after about that much
    text (a search does not wait for a huge backlog: the sweep has it).
    """
    budget = settings.CONTEXTSVC_RECALL_CATCH_UP_BYTES if max_bytes is None else max_bytes
    # The usual case, one read and no transaction: nothing new since the index last ran.
    current = (
        Session.objects.filter(pk=session_pk)
        .annotate(indexed=Coalesce(Subquery(_indexed_seq()), Value(0), output_field=IntegerField()))
        .values_list("indexed", "last_seq")
        .first()
    )
    if current is None or current[0] >= current[1]:
        indexed, last = current or (0, 0)
        return CatchUp(indexed_seq=indexed, last_seq=last, segments=0)
    with transaction.atomic():
        RecallState.objects.bulk_create([RecallState(session_id=session_pk)], ignore_conflicts=True)
        state = RecallState.objects.select_for_update().get(session_id=session_pk)
        last_seq = (
            Session.objects.filter(pk=session_pk).values_list("last_seq", flat=True).first() or 0
        )
        written = used = 0
        while state.indexed_seq < last_seq and used < budget:
            rows = list(
                Message.objects.filter(
                    session_id=session_pk, seq__gt=state.indexed_seq, seq__lte=last_seq
                )
                .order_by("seq")
                .values_list(*_MESSAGE_FIELDS)[:MESSAGES_PER_BATCH]
            )
            if not rows:
                break
            segments = list(_batch_segments(session_pk, rows))
            RecallSegment.objects.bulk_create(segments, batch_size=INSERT_BATCH)
            written += len(segments)
            used += sum(len(s.text) for s in segments)
            state.indexed_seq = rows[-1][0]
        state.updated_at = timezone.now()
        state.save(update_fields=["indexed_seq", "updated_at"])
    return CatchUp(indexed_seq=state.indexed_seq, last_seq=last_seq, segments=written)


def _batch_segments(session_pk: int, rows: list[tuple[Any, ...]]) -> Iterator[RecallSegment]:
    refs = {row[5] for row in rows if row[5]}
    outputs = {
        o.ref: o for o in ToolOutput.objects.filter(session_id=session_pk, ref__in=refs)
    }  # fmt: skip
    indexed = set(
        RecallSegment.objects.filter(output_id__in=[o.pk for o in outputs.values()])
        .values_list("output_id", flat=True)
        .distinct()
    )
    # The service's own tools are left out: a search would find its own call
    # and every earlier search's answer, and a read's answer is the output again.
    builtins = set(REGISTRY.tools)
    for seq, role, content, tool_calls, name, ref in rows:
        if role == "tool" and name in builtins:
            continue
        base = {"session_id": session_pk, "seq": seq, "role": role}
        output = outputs.get(ref) if ref else None
        if output is not None:
            if output.pk not in indexed:
                indexed.add(output.pk)
                yield from _output_segments(output, base, name or output.tool_name)
        elif content:
            yield from _text_segments(content, base, source="message", tool_name=name or "")
        for call in tool_calls or ():
            if call.get("name") in builtins:
                continue
            text = f"{call.get('name', '')}({_arguments(call.get('arguments'))})"
            yield from _text_segments(
                text, base, source="message", tool_name=str(call.get("name") or "")
            )


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, default=str)


def _text_segments(
    text: str, base: dict[str, Any], *, source: str, tool_name: str, first_line: int = 1
) -> Iterator[RecallSegment]:
    for seg in split_segments(nul.escape(text)):
        yield RecallSegment(
            **base,
            source=source,
            tool_name=tool_name[:200],
            first_line=seg.first_line + first_line - 1,
            text=seg.text,
        )


def _output_segments(
    output: ToolOutput, base: dict[str, Any], tool_name: str
) -> Iterator[RecallSegment]:
    """The output's text, chunk by chunk: each chunk knows the number of its first line."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in iter_chunks(output.pk, 0, max_batch=16):
        text = decoder.decode(chunk.data)
        for seg in _text_segments(
            text, base, source="output", tool_name=tool_name, first_line=chunk.first_line
        ):
            seg.ref = output.ref
            seg.output_id = output.pk
            yield seg


def _indexed_seq() -> Any:
    return RecallState.objects.filter(session_id=OuterRef("pk")).values("indexed_seq")[:1]


def recall_add_summary(*, session: Session, text: str, through_seq: int) -> None:
    """Index a summary a compaction wrote (it replaces messages in the context)."""
    if not text.strip():
        return
    base = {"session_id": session.pk, "seq": through_seq, "role": ""}
    RecallSegment.objects.bulk_create(
        list(_text_segments(text, base, source="summary", tool_name="")),
        batch_size=INSERT_BATCH,
    )


def sessions_behind(max_age_hours: int = 48, limit: int = 200) -> Iterable[int]:
    """Sessions updated lately whose messages are not all in the index yet: 1 query."""
    since = timezone.now() - timedelta(hours=max_age_hours)
    return list(
        Session.objects.filter(updated_at__gte=since)
        .annotate(indexed=Coalesce(Subquery(_indexed_seq()), Value(0), output_field=IntegerField()))
        .filter(last_seq__gt=F("indexed"))
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )


def recall_index_sweep(max_age_hours: int = 48) -> int:
    """Bring every lately updated session's index up to date; → segments written."""
    return sum(
        recall_catch_up(pk, max_bytes=2**62).segments for pk in sessions_behind(max_age_hours)
    )


# Sessions this process enqueued lately → when (time.monotonic()).
_scheduled: dict[int, float] = {}
_SCHEDULED_MAX = 10_000


def recall_schedule(session: Session, state: Any, last_role: str) -> None:
    """``REGISTRY.after_append``: index the session in the background soon.

    At most once per ``CONTEXTSVC_RECALL_INDEX_DELAY`` seconds per session and
    process (memory only: no round trip on the appends in between), with that
    countdown, so one task indexes a burst of appends. Never raises: a broker
    outage leaves the session to the periodic sweep, or to its next search.
    """
    delay = settings.CONTEXTSVC_RECALL_INDEX_DELAY
    if delay <= 0:
        return
    now = time.monotonic()
    if now - _scheduled.get(session.pk, -delay) < delay:
        return
    if len(_scheduled) >= _SCHEDULED_MAX:
        _scheduled.clear()
    _scheduled[session.pk] = now
    # The queue of the sessions' background chores (exact counts too), if one is set.
    queue = settings.CONTEXTSVC_TOKEN_COUNT_QUEUE
    try:
        celery_app.send_task(
            INDEX_TASK,
            args=[session.pk],
            countdown=delay,
            ignore_result=True,
            **({"queue": queue} if queue else {}),
        )
    except Exception:  # noqa: BLE001 - the append already succeeded
        logger.exception("could not enqueue the recall index of session %s", session.pk)
