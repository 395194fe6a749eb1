"""Restoring a snapshot: an earlier compacted window, or the uncompacted transcript, made live again."""

from __future__ import annotations

from django.db import transaction

from contextsvc.engine.strategies.base import TokenCounter
from contextsvc.engine.summary_placement import preamble
from sessions import accounting, hotpath
from sessions.models import Session

from .. import selectors
from ..models import CompactionState, Snapshot, ViewChange
from .window import (
    WINDOW_FIELDS,
    recount_tool_outputs,
    set_message_views,
    set_window,
    snapshot_message,
)


@transaction.atomic
def snapshot_restore(*, session: Session, snapshot_id: int | None) -> Snapshot:
    """Make an earlier snapshot — or, with ``None``, the uncompacted transcript —
    the live window again (``POST .../snapshots/{id}/restore`` and the
    dashboard). Nothing is deleted: the restore is itself a snapshot, and the
    views it changes are logged like a compaction's.

    Views: the snapshot's kept messages get the views they had in it; any later
    message a compaction changed since gets back the view it had before that
    compaction first touched it.
    """
    locked = hotpath.lock_session(session.pk)
    target = (
        None
        if snapshot_id is None
        else selectors.snapshot_get(session=locked, snapshot_id=snapshot_id)
    )
    desired: dict[int, tuple[str | None, str, int]] = {}
    changes = ViewChange.objects.filter(session=locked).order_by("seq", "id")
    if target is None:
        retain, summary, start, head_end = "", "", 1, 0
    else:
        retain, summary, start = target.retain, target.summary, target.window_start_seq
        # docs/concepts/compaction.md#sandwich-head: the snapshot's head comes back live with it.
        head_end = target.head_end_seq
        for m in target.messages:
            view = m["content"] if m.get("has_view") else None
            desired[m["seq"]] = (view, m.get("view", "full"), m.get("token_count") or 0)
        changes = changes.filter(snapshot_id__gt=target.pk, seq__gt=target.through_seq)
    for change in changes.values_list("seq", "old_view", "old_state", "old_tokens"):
        # The first change after the restore point holds the view before it.
        desired.setdefault(change[0], (change[1], change[2], change[3]))
    view_changes = set_message_views(locked, desired)
    counter = TokenCounter(accounting.tokenizer_of(locked), accounting.estimate_config_of(locked))
    set_window(
        locked,
        retain=retain,
        summary=summary,
        start_seq=start,
        counter=counter,
        head_end_seq=head_end,
    )
    extra = recount_tool_outputs(locked)
    locked.save(update_fields=[*WINDOW_FIELDS, *extra])
    messages = [
        *selectors.head_messages(locked),
        *selectors.window_messages(locked, start_seq=start, through_seq=locked.last_seq),
    ]
    snapshot = Snapshot.objects.create(
        session=locked,
        kind=Snapshot.Kind.RESTORE,
        restored_from=target,
        uncompacted=target is None,
        retain=retain,
        summary=summary,
        window_start_seq=start,
        head_end_seq=locked.head_end_seq,
        through_seq=locked.last_seq,
        token_count=locked.summary_tokens + locked.conversation_tokens,
        message_count=len(preamble(retain, summary)) + len(messages),
        messages=[snapshot_message(m) for m in messages],
    )
    for change in view_changes:
        change.snapshot = snapshot
    ViewChange.objects.bulk_create(view_changes, batch_size=500)
    # docs/concepts/compaction.md#sandwich-cache: the cached sandwich state no longer describes the
    # summary slot.
    CompactionState.objects.filter(session=locked).update(
        strategy="", summary="", range_start=None, range_end=None, compressed_at=None
    )
    session.window_start_seq = locked.window_start_seq
    session.head_end_seq = locked.head_end_seq
    return snapshot
