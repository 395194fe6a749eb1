"""Garbage collection of tool outputs nothing references any more
(docs/concepts/trimming.md#garbage-collection)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from contextsvc.errors import ValidationFailed

from ..extensions import REGISTRY
from ..models import Message, Session, ToolOutput, ToolOutputChunk


def live_message_refs(outputs: Sequence[ToolOutput]) -> Iterable[str]:
    """Refs a message in its session's live window carries (its view may be a placeholder)."""
    # A sandwich's head (seqs up to ``head_end_seq``) is live too.
    return Message.objects.filter(
        Q(seq__gte=F("session__window_start_seq")) | Q(seq__lte=F("session__head_end_seq")),
        output_ref__in=[o.ref for o in outputs],
    ).values_list("output_ref", flat=True)


def retained_text_refs(outputs: Sequence[ToolOutput]) -> Iterable[str]:
    """Refs named in a session's retain or summary (docs/concepts/compaction.md#directives lists
    refs to keep)."""
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
    """The refs among ``outputs`` that some registered reference check still claims."""
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
    """docs/concepts/trimming.md#garbage-collection: delete outputs nothing references any more.

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


def active_session_refs(outputs: Sequence[ToolOutput]) -> Iterable[str]:
    """Refs of outputs whose session was used within the retention period.

    ``history_search`` reaches every output a session ever held, not only those
    its window lists: while the session is in use, none of them is garbage.
    """
    cutoff = timezone.now() - timedelta(days=settings.CONTEXTSVC_OUTPUT_RETENTION_DAYS)
    return ToolOutput.objects.filter(
        pk__in=[o.pk for o in outputs], session__updated_at__gte=cutoff
    ).values_list("ref", flat=True)
