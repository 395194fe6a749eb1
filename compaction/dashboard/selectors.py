"""The inspector's compaction reads: runs, snapshots and their diffs, restores, a dry-run preview.

Operators see every session, so these take the session (already resolved
for an operator) rather than an owner. Each runs a fixed number of queries
whatever the session's size.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Max, Min, Sum
from django.http import Http404

from compaction.models import CompactionRun, Snapshot, ViewChange
from compaction.services.plan import compaction_plan
from compaction.services.policy import resolve_chain
from compaction.summarizers import for_session, summary_model
from sessions.extensions import WindowEvent
from sessions.models import Message, Session

STRATEGY_LABELS = {
    "chain": "Default chain",
    "tool_clearing": "Tool clearing only",
    "summarize": "Summarise",
    "sandwich": "Sandwich (top + bottom)",
    "drop_oldest_turns": "Drop oldest turns",
    "sliding_window": "Sliding window (last N messages)",
    "full_history": "Full history (never compress)",
    "tree": "Tree (chunk summaries, summaries of summaries)",
}
HISTORY_LIMIT = 20


def compaction_runs(session: Session, *, limit: int = HISTORY_LIMIT) -> list[CompactionRun]:
    """Newest runs with their snapshot ids: 1 query (snapshot messages deferred)."""
    return list(
        CompactionRun.objects.filter(session=session)
        .select_related("snapshot")
        .defer("snapshot__messages", "reports")
        .order_by("-created_at")[:limit]
    )


def active_run(session: Session) -> CompactionRun | None:
    """The run queued or running for the session, if any (the panel follows it): 1 query."""
    return (
        CompactionRun.objects.filter(session=session, status__in=CompactionRun.ACTIVE)
        .order_by("-created_at")
        .first()
    )


def run_for_operator(session: Session, run_id: str) -> CompactionRun:
    """One run of the session by its id (a UUID), or 404."""
    try:
        pk = uuid.UUID(str(run_id))
    except ValueError:
        raise Http404("No such compaction run") from None
    run = CompactionRun.objects.filter(session=session, pk=pk).first()
    if run is None:
        raise Http404("No such compaction run")
    return run


def restore_snapshots(session: Session, *, limit: int = HISTORY_LIMIT) -> list[Snapshot]:
    """Restore snapshots (they have no run), newest first: 1 query."""
    return list(
        Snapshot.objects.filter(session=session, kind=Snapshot.Kind.RESTORE)
        .defer("messages")
        .order_by("-id")[:limit]
    )


def snapshot_for_operator(session: Session, snapshot_id: int) -> Snapshot:
    """One snapshot of the session, or 404."""
    snapshot = Snapshot.objects.filter(session=session, pk=snapshot_id).first()
    if snapshot is None:
        raise Http404("No such snapshot")
    return snapshot


@dataclass(slots=True)
class SnapshotDiff:
    snapshot: Snapshot
    run: CompactionRun | None
    before_start: int
    removed_count: int
    removed_tokens: int
    removed_first: int | None
    removed_last: int | None
    view_changes: list[dict[str, Any]]
    kept: list[dict[str, Any]]
    kept_more: int
    summary_tokens: int


KEPT_SHOWN = 60


def snapshot_diff(session: Session, snapshot: Snapshot) -> SnapshotDiff:
    """Before/after of one snapshot's window: 3 queries whatever the window's size.

    Before = the window the compaction started from (``base_window_start_seq`` …
    ``through_seq``); after = retain + summary + the kept messages, with the views
    the compaction changed (``ViewChange``: old → new state and tokens).
    """
    run = snapshot.run if snapshot.run_id else None
    before_start = run.base_window_start_seq if run and run.base_window_start_seq else 1
    # A sandwich's head (seq ≤ head_end_seq) stayed: it is not among the removed.
    removed = Message.objects.filter(
        session=session,
        seq__gte=max(before_start, snapshot.head_end_seq + 1),
        seq__lt=snapshot.window_start_seq,
    ).aggregate(n=Count("id"), tokens=Sum("token_count"), first=Min("seq"), last=Max("seq"))
    changes = [
        {
            "seq": c.seq,
            "old_state": c.old_state,
            "new_state": c.new_state,
            "old_tokens": c.old_tokens,
            "new_tokens": c.new_tokens,
        }
        for c in ViewChange.objects.filter(snapshot=snapshot).order_by("seq")[:200]
    ]
    messages = snapshot.messages or []
    kept = [
        {
            "seq": m.get("seq"),
            "role": m.get("role"),
            "view": m.get("view", "full"),
            "tokens": m.get("token_count") or 0,
            "preview": _snapshot_preview(m),
        }
        for m in messages[-KEPT_SHOWN:]
    ]
    kept_tokens = sum(m.get("token_count") or 0 for m in messages)
    return SnapshotDiff(
        snapshot=snapshot,
        run=run,
        before_start=before_start,
        removed_count=int(removed["n"] or 0),
        removed_tokens=int(removed["tokens"] or 0),
        removed_first=removed["first"],
        removed_last=removed["last"],
        view_changes=changes,
        kept=kept,
        kept_more=max(0, len(messages) - KEPT_SHOWN),
        summary_tokens=max(0, snapshot.token_count - kept_tokens),
    )


def _snapshot_preview(m: dict[str, Any], limit: int = 160) -> str:
    content = m.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    text = " ".join(str(content or "").split())
    if not text and m.get("tool_calls"):
        text = "→ " + ", ".join(str(c.get("name")) for c in m["tool_calls"])
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(slots=True)
class CompactionPreview:
    chain: list[str]
    changed: bool
    before_tokens: int
    after_tokens: int
    before_msgs: int
    after_msgs: int
    strategies_run: list[str]
    removed_count: int
    removed_tokens: int
    removed_first: int | None
    removed_last: int | None
    changed_views: list[dict[str, Any]]
    kept_first: int | None
    kept_last: int | None
    retention: dict[str, Any] | None
    summarizer_note: str
    summarizer_name: str = ""  # who the real run will ask: offline / anthropic / openai
    summary_model: str = ""  # the model it will ask; "" for the offline summariser (no model)

    @property
    def saved_pct(self) -> float:
        return (
            round(100 * (self.before_tokens - self.after_tokens) / self.before_tokens, 1)
            if self.before_tokens
            else 0.0
        )


def compaction_preview(
    session: Session, *, strategy: str, instructions: str = "", retain_last_turns: int | None = None
) -> CompactionPreview:
    """What a manual compaction would do, computed now without changing anything.

    Runs the compaction's own planning step (``compaction_plan``: same
    window, chain, target and strategies as a real run) with the offline
    summariser, so no LLM is called; the real run's summary may differ in
    length when an LLM writes it. Nothing is written.
    """
    plan = compaction_plan(
        session=session,
        strategy=strategy,
        instructions=instructions,
        retain_last_turns=retain_last_turns,
    )
    before = plan.window.messages
    after = {m.seq: m for m in plan.result.window.messages}
    removed = [m for m in before if m.seq not in after]
    changed_views = [
        {
            "seq": m.seq,
            "role": m.role,
            "old_state": m.view_state,
            "new_state": after[m.seq].view_state,
            "old_tokens": m.token_count or 0,
            "new_tokens": after[m.seq].token_count or 0,
        }
        for m in before
        if m.seq in after
        and (m.view, m.view_state, m.token_count)
        != (after[m.seq].view, after[m.seq].view_state, after[m.seq].token_count)
    ]
    r = plan.result.result
    kept_seqs = sorted(after)
    policy = (session.policy or {}).get("compaction") or {}
    try:
        real = for_session(
            model=policy.get("model") or session.model,
            provider=session.provider,
            choice=policy.get("summarizer"),
        )
        name = real.name
        model = summary_model(real, policy_model=policy.get("model"), session_model=session.model)
    except Exception:  # noqa: BLE001 - only decides the wording of a note
        name, model = "unknown", session.model
    if name == "offline":
        note = (
            "Summaries are written by the offline summariser: the run will do exactly "
            "this, unless the window changes first."
        )
    else:
        note = (
            f"Summary length estimated offline; the run asks {model} ({name} summariser), "
            "whose summary may be longer or shorter."
        )
    return CompactionPreview(
        chain=list(resolve_chain(session, strategy)),
        changed=plan.result.changed and r.after_tokens < r.before_tokens,
        before_tokens=r.before_tokens,
        after_tokens=r.after_tokens,
        before_msgs=r.before_msg_count,
        after_msgs=r.after_msg_count,
        strategies_run=list(r.strategies_run),
        removed_count=len(removed),
        removed_tokens=sum(m.token_count or 0 for m in removed),
        removed_first=removed[0].seq if removed else None,
        removed_last=removed[-1].seq if removed else None,
        changed_views=changed_views[:100],
        kept_first=kept_seqs[0] if kept_seqs else None,
        kept_last=kept_seqs[-1] if kept_seqs else None,
        retention=plan.retention,
        summarizer_note=note,
        summarizer_name=name,
        summary_model="" if name in ("offline", "unknown") else model,
    )


def live_snapshot_id(session: Session) -> int | None:
    """The newest snapshot: the one the live window comes from."""
    return (
        Snapshot.objects.filter(session=session)
        .order_by("-id")
        .values_list("pk", flat=True)
        .first()
    )


def window_events(session: Session) -> list[WindowEvent]:
    """Every compaction and restore, oldest first, from the session's snapshots: 1 query.

    Registered for the usage chart (``REGISTRY.window_events``), which marks
    where the live window restarted.
    """
    rows = (
        Snapshot.objects.filter(session=session)
        .order_by("id")
        .values_list("through_seq", "window_start_seq", "token_count", "kind", "head_end_seq")
    )
    return [WindowEvent(*row) for row in rows]
