"""Compaction runs, snapshots (docs/concepts/compaction.md#snapshots) and per-session compaction
state.

The transcript (``sessions.Message``) is never deleted or rewritten by a
compaction: a compaction moves the session's live-window start, replaces its
retain/summary and may change the *view* of kept messages. Each such change
is logged (``ViewChange``) with the view it replaced, so any snapshot — or the
uncompacted transcript — can be made the live window again.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from sessions.models import Session


class CompactionRun(models.Model):
    """One compaction of one session: requested, run (by a worker or in the
    request), and its outcome. Job state lives here, not in Celery's backend."""

    class Trigger(models.TextChoices):
        AUTO = "auto"
        MANUAL = "manual"
        TOOL = "tool"
        EMERGENCY = "emergency"
        # The client compacted through the proxy (Codex's checkpoint, the Responses API's compaction).
        CLIENT = "client"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="compaction_runs")
    trigger = models.CharField(max_length=10, choices=Trigger.choices)
    # Why it was requested, with the numbers that decided it (``compaction.reasons``,
    # docs/concepts/compaction.md#reasons); {} for runs recorded before reasons were.
    reason = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    # "chain" or one strategy name; ``chain`` is what actually runs, in order.
    strategy = models.CharField(max_length=20, default="chain")
    chain = models.JSONField(default=list)
    # Manual and tool runs are forced (docs/concepts/compaction.md#forced-runs): they run
    # their strategy fully instead of stopping at the target.
    forced = models.BooleanField(default=False)
    instructions = models.TextField(blank=True, default="")
    retain_last_turns = models.PositiveIntegerField(null=True, blank=True)

    # docs/concepts/compaction.md#compact-result, plus the budget's "used" before and after.
    strategies_run = models.JSONField(default=list, blank=True)
    reports = models.JSONField(default=list, blank=True)
    before_tokens = models.PositiveIntegerField(null=True, blank=True)
    after_tokens = models.PositiveIntegerField(null=True, blank=True)
    before_msg_count = models.PositiveIntegerField(null=True, blank=True)
    after_msg_count = models.PositiveIntegerField(null=True, blank=True)
    before_used = models.PositiveIntegerField(null=True, blank=True)
    after_used = models.PositiveIntegerField(null=True, blank=True)
    changed = models.BooleanField(default=False)
    target_tokens = models.PositiveIntegerField(null=True, blank=True)

    model = models.CharField(max_length=200, blank=True, default="")
    summarizer = models.CharField(max_length=50, blank=True, default="")
    # The window the result was computed from: seqs up to ``through_seq``,
    # starting at ``base_window_start_seq``. Later appends stay live after it.
    through_seq = models.PositiveIntegerField(null=True, blank=True)
    base_window_start_seq = models.PositiveIntegerField(null=True, blank=True)

    retention_score = models.FloatField(null=True, blank=True)
    retention = models.JSONField(null=True, blank=True)
    # What the dry run (the dashboard's preview) predicted when the run was
    # requested: kept beside the result, so the page shows predicted vs actual.
    prediction = models.JSONField(null=True, blank=True)

    error_code = models.CharField(max_length=30, blank=True, default="")
    error = models.TextField(blank=True, default="")
    # Each claim bumps it; only the holder of the latest attempt may apply.
    attempts = models.PositiveIntegerField(default=0)
    celery_task_id = models.CharField(max_length=100, blank=True, default="")
    # A run "running" past its lease was abandoned (a killed worker) and may be taken over.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    # What the run cost in the provider's prompt-cache units (engine.planner):
    # tokens re-written after the prefix break, the summary call's input (and the
    # part of it that is the cached prefix) and output, and the calls it buys.
    cost = models.JSONField(null=True, blank=True)

    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # At most one queued/running compaction per session; the emergency
            # path (the provider already said "too long") never waits for one.
            models.UniqueConstraint(
                fields=["session"],
                condition=Q(status__in=["queued", "running"]) & ~Q(trigger="emergency"),
                name="uniq_active_compaction_per_session",
            )
        ]
        indexes = [
            models.Index(fields=["session", "-created_at"], name="compaction_run_session_idx"),
            # Every worker's sweep for lapsed leases, every few seconds: only
            # the few active runs, never the whole history.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status__in=["queued", "running"]),
                name="compaction_run_lease_idx",
            ),
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.trigger}:{self.status}"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.SUCCEEDED, self.Status.FAILED)


class Snapshot(models.Model):
    """The compacted live window at one point (docs/concepts/compaction.md#snapshots): retain,
    summary and the kept messages as they were sent (views, never blobs), up to ``through_seq``.

    Resume reads the newest snapshot plus the transcript after ``through_seq``.
    """

    class Kind(models.TextChoices):
        COMPACTION = "compaction"
        RESTORE = "restore"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="snapshots")
    run = models.OneToOneField(
        CompactionRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="snapshot"
    )
    kind = models.CharField(max_length=12, choices=Kind.choices, default=Kind.COMPACTION)
    # A restore snapshot: which snapshot it brought back (null with
    # ``uncompacted``: the whole transcript).
    restored_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    uncompacted = models.BooleanField(default=False)
    retain = models.TextField(blank=True, default="")
    summary = models.TextField(blank=True, default="")
    window_start_seq = models.PositiveIntegerField()
    # docs/concepts/compaction.md#sandwich-head: the head (seqs up to this) is live before the
    # summary; its messages lead ``messages``. 0: no head.
    head_end_seq = models.PositiveIntegerField(default=0)
    through_seq = models.PositiveIntegerField()
    token_count = models.PositiveIntegerField()
    message_count = models.PositiveIntegerField()
    messages = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["session", "-id"], name="snapshot_session_idx")]
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.pk} {self.kind}"


class ViewChange(models.Model):
    """A kept message whose view a compaction (or a restore) changed, with the
    view it had before: what a later restore puts back."""

    snapshot = models.ForeignKey(Snapshot, on_delete=models.CASCADE, related_name="view_changes")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    seq = models.PositiveIntegerField()
    # null, not "": like Message.view, None means "the content is the view".
    old_view = models.TextField(null=True, blank=True)  # noqa: DJ001
    old_state = models.CharField(max_length=10)
    old_tokens = models.PositiveIntegerField()
    new_view = models.TextField(null=True, blank=True)  # noqa: DJ001
    new_state = models.CharField(max_length=10)
    new_tokens = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["session", "seq"], name="view_change_session_seq_idx")]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.old_state}→{self.new_state}"


class CompactionState(models.Model):
    """Per-session compaction state that must survive between runs.

    - docs/concepts/compaction.md#sandwich-cache: the sandwich's cached summary and the
      ``summary_range`` (message indices, ``[start, end)``) it covers;
    - the circuit breaker: consecutive failed auto runs since the last success.
    """

    session = models.OneToOneField(
        Session, primary_key=True, on_delete=models.CASCADE, related_name="compaction_state"
    )
    strategy = models.CharField(max_length=20, blank=True, default="")
    summary = models.TextField(blank=True, default="")
    range_start = models.PositiveIntegerField(null=True, blank=True)
    range_end = models.PositiveIntegerField(null=True, blank=True)
    compressed_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    breaker_opened_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"compaction state of {self.session_id}"
