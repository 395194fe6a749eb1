"""Sessions, their append-only transcript, agent keys and model profiles.

Business rules live in ``services/`` (writes) and ``contextsvc.engine``
(formulas); the models hold data and the small invariants the database can
enforce (unique seq per session, unique session id per owner).
"""

from __future__ import annotations

import hashlib
import secrets

from django.db import models
from django.utils import timezone

KEY_PREFIX = "cx_"


def hash_key(raw_key: str) -> str:
    # Keys are 32 random bytes, so a fast unsalted hash is enough: there is no
    # dictionary to attack, and lookups stay a single indexed equality.
    return hashlib.sha256(raw_key.encode()).hexdigest()


class AgentKey(models.Model):
    """An agent's bearer key. Only its hash is stored; the key is shown once."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise a key")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @staticmethod
    def generate_raw_key() -> str:
        return KEY_PREFIX + secrets.token_urlsafe(32)


class ModelProfile(models.Model):
    """Limits per provider/model; ``model=""`` is the provider's default row.

    Resolution is model > provider > built-in defaults
    (docs/concepts/context-build.md#limit-resolution).
    """

    provider = models.CharField(max_length=50)
    model = models.CharField(max_length=200, blank=True, default="")
    context_window = models.PositiveIntegerField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    buffer_tokens = models.PositiveIntegerField(null=True, blank=True)
    tokenizer = models.CharField(max_length=100, blank=True, default="")
    # Smallest prefix the provider will cache (Anthropic: 1,024-4,096 by model).
    min_cacheable_tokens = models.PositiveIntegerField(null=True, blank=True)
    # USD per million tokens: {"input": .., "output": .., "cache_write_5m": ..,
    # "cache_write_1h": .., "cache_read": ..}; {} is "no price" (``services.prices``
    # checks a table before it is stored).
    prices = models.JSONField(default=dict, blank=True)
    # Who set the prices last, and when (docs/dashboard.md#models-and-prices);
    # null: the published prices a migration seeded, or none ever set.
    prices_set_at = models.DateTimeField(null=True, blank=True)
    prices_set_by = models.CharField(max_length=150, blank=True, default="")
    # Whether the Messages API takes a ``system`` message inside ``messages``
    # (Claude Opus 4.8 on; earlier models answer 400). True for unknown models:
    # a future model is assumed to accept what the newest ones do.
    mid_system_messages = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "model"], name="uniq_profile_provider_model"
            )
        ]
        ordering = ["provider", "model"]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        """``provider/model``; ``provider/*`` for the provider's default row."""
        return f"{self.provider}/{self.model or '*'}"

    def as_limits(self) -> dict:
        return {
            "context_window": self.context_window,
            "max_output_tokens": self.max_output_tokens,
            "buffer_tokens": self.buffer_tokens,
            "tokenizer": self.tokenizer or None,
        }


class Session(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        FINAL = "final"

    owner = models.ForeignKey(AgentKey, on_delete=models.CASCADE, related_name="sessions")
    external_id = models.CharField(max_length=128)
    agent = models.CharField(max_length=100, blank=True, default="")
    model = models.CharField(max_length=200)
    provider = models.CharField(max_length=50, blank=True, default="")

    # Resolved limits (docs/concepts/context-build.md#limit-resolution done once, at create/patch
    # time).
    context_window = models.PositiveIntegerField()
    max_output_tokens = models.PositiveIntegerField()
    buffer_tokens = models.PositiveIntegerField()
    tokenizer = models.CharField(max_length=100)
    policy = models.JSONField(default=dict, blank=True)

    sections = models.JSONField(default=list, blank=True)  # [{name, content, cacheable, kind}]
    tools = models.JSONField(
        default=list, blank=True
    )  # [{name, description, input_schema, category}]
    summary = models.TextField(blank=True, default="")
    retain = models.TextField(blank=True, default="")
    # First seq of the live window: messages before it are kept for audit only.
    window_start_seq = models.PositiveIntegerField(default=1)
    # docs/concepts/compaction.md#sandwich: the conversation's first messages (seq ≤ this) stay
    # live as messages before the summary while the middle is compacted; the
    # live window is [1 … head_end_seq] + [window_start_seq …]. 0: no head.
    head_end_seq = models.PositiveIntegerField(default=0)

    # Cached counters, updated in the same transaction as the rows they count,
    # so the budget never re-reads or re-tokenizes history.
    last_seq = models.PositiveIntegerField(default=0)
    message_count = models.PositiveIntegerField(default=0)
    live_message_count = models.PositiveIntegerField(default=0)
    system_tokens = models.PositiveIntegerField(default=0)
    skill_tokens = models.PositiveIntegerField(default=0)
    tool_tokens = models.PositiveIntegerField(default=0)
    summary_tokens = models.PositiveIntegerField(default=0)
    conversation_tokens = models.PositiveIntegerField(default=0)
    # Assistant tool calls still waiting for their result: {call_id: tool name}.
    open_tool_calls = models.JSONField(default=dict, blank=True)

    # Provider-reported usage calibrates the projection
    # (docs/concepts/context-build.md#usage-total).
    reported_total = models.PositiveIntegerField(null=True, blank=True)
    reported_through_seq = models.PositiveIntegerField(null=True, blank=True)
    # Our estimate of that same prefix at report time: calibrated projection =
    # reported_total + (estimate now - estimated_at_report), which follows any
    # change since (appends, new sections, trims, compaction) without a re-read.
    estimated_at_report = models.PositiveIntegerField(null=True, blank=True)

    # Tool output cache (docs/concepts/trimming.md#stored-in-full). Untrimmed tool-output view
    # tokens in the live window (docs/concepts/trimming.md#tool-output-budget), so the trim decision
    # never re-reads history; the seq of the newest trimmed tool message (trimming is oldest
    # first, so everything at or before it is trimmed: candidates start after
    # it); and the window start these were counted for (a compaction that
    # moves the window makes the append path recount once).
    tool_output_tokens = models.PositiveBigIntegerField(default=0)
    tool_trim_seq = models.PositiveIntegerField(default=0)
    tool_count_window_seq = models.PositiveIntegerField(default=1)
    # docs/concepts/guard.md#tool-budget: reserved output tokens count as the guard's pending
    # tokens until the tool result arrives ({tool_call_id or "~n": tokens}).
    reserved_tokens = models.PositiveBigIntegerField(default=0)
    tool_reservations = models.JSONField(default=dict, blank=True)
    # docs/concepts/guard.md#tool-preflight: once set, canExecuteTool is false.
    tool_budget_exceeded = models.BooleanField(default=False)

    # The main conversation this one branched from: a client's side request
    # (title generation, a quota probe, a sub-agent) gets a session of its own
    # linked here, never a place in the main transcript (proxy.services.identity).
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="side_sessions"
    )

    # Retractions so far: a compaction computed before the latest one is stale
    # (its plan still holds the retracted messages), so apply recomputes.
    retract_count = models.PositiveIntegerField(default=0)

    # How the session is recognised in the list (docs/dashboard.md): "api" or
    # "proxy", the client that drives it (from its user agent: Claude Code,
    # Codex, an SDK), the start of its first user message, and how many of its
    # model calls failed upstream (kept here so the list never counts calls).
    via = models.CharField(max_length=8, default="api")
    client = models.CharField(max_length=64, blank=True, default="")
    first_user_text = models.CharField(max_length=200, blank=True, default="")
    failed_calls = models.PositiveIntegerField(default=0)

    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    final_reason = models.CharField(max_length=50, blank=True, default="")
    guard_status = models.CharField(max_length=10, default="ok")
    # The guard's projection at the last write: what ``guard_status`` was decided on.
    used_tokens = models.PositiveIntegerField(default=0)

    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "external_id"], name="uniq_session_owner_id")
        ]
        ordering = ["-updated_at", "-id"]

    def __str__(self) -> str:
        return self.external_id


class Message(models.Model):
    """One transcript message. Append-only: compaction never deletes rows."""

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"
        # A system instruction the client placed mid-conversation, kept at its place.
        SYSTEM = "system"

    # No index of its own: the unique (session, seq) leads with it.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField(blank=True, default="")
    # Set when the agent posted content as a list of parts (text, image, ...).
    parts = models.JSONField(null=True, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)  # [{id, name, arguments}]
    tool_call_id = models.CharField(max_length=200, null=True, blank=True)
    name = models.CharField(max_length=200, null=True, blank=True)
    reasoning = models.TextField(null=True, blank=True)
    output_ref = models.CharField(max_length=64, null=True, blank=True)
    # What the model is shown when it differs from content (cut / trimmed output).
    view = models.TextField(null=True, blank=True)
    view_state = models.CharField(max_length=10, default="full")
    # The agent pinned it (``"pinned": true`` on append): compaction keeps it
    # verbatim above the summary, tool clearing leaves it.
    pinned = models.BooleanField(default=False)
    token_count = models.PositiveIntegerField()  # of the in-context form, computed once
    # token_count is a bounded estimate (a text past the append's exact budget,
    # contextsvc.engine.token_estimate) until a background task counts it exactly.
    token_count_estimated = models.BooleanField(default=False)
    # Why and when the view became a placeholder: {reason, detail, at, tokens_before}.
    trim_info = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Taken out of the live window by the agent (an undone or retried turn):
    # kept in the transcript for the record, never sent or counted again.
    retracted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="uniq_message_session_seq")
        ]
        indexes = [
            # GC asks "does a live message still reference this output?".
            models.Index(fields=["output_ref"], name="message_output_ref_idx"),
            # Results by call id. Appends no longer read it (an answered id may
            # be reused; the open ones are on the session row); kept until a
            # migration drops it. Partial: only tool results carry the id.
            models.Index(
                fields=["session", "tool_call_id"],
                name="message_tool_call_id_idx",
                condition=models.Q(tool_call_id__isnull=False),
            ),
            # The sweep for estimates whose exact count was never enqueued (a
            # broker outage): partial, so it holds only those few rows.
            models.Index(
                fields=["created_at"],
                name="message_estimated_idx",
                condition=models.Q(token_count_estimated=True),
            ),
        ]
        ordering = ["session", "seq"]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.role}"


class UsageReport(models.Model):
    """Provider-reported usage for one LLM call, beside our estimate at the time."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="usage_reports")
    through_seq = models.PositiveIntegerField()
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_creation_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField()
    estimated_tokens = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return f"{self.session_id}@{self.through_seq}: {self.total_tokens} reported"


class IdempotencyRecord(models.Model):
    """First response to a POST carrying an Idempotency-Key, replayed on retry."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "key"], name="uniq_idempotency_session_key")
        ]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.key}"


class ToolOutput(models.Model):
    """A tool output stored in full (docs/concepts/trimming.md#stored-in-full).

    The bytes live in ``ToolOutputChunk`` rows of whole lines, so a line range
    or a grep reads only the chunks it needs. ``sha256`` is unique per session
    (identical outputs are stored once); it stays null while a raw upload is
    still streaming, inside its transaction.
    """

    ref = models.CharField(max_length=64, unique=True)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="outputs")
    tool_name = models.CharField(max_length=200, blank=True, default="")
    byte_size = models.PositiveBigIntegerField(default=0)
    line_count = models.PositiveBigIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0)
    sha256 = models.CharField(max_length=64, null=True, blank=True)
    source = models.CharField(max_length=10, default="message")  # message / upload
    created_at = models.DateTimeField(default=timezone.now)
    # Touched whenever a message (re)uses the output; GC keeps anything used
    # within the retention period even before the message is committed.
    last_used_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "sha256"], name="uniq_output_session_sha256")
        ]
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return self.ref


class ToolOutputChunk(models.Model):
    """About 256 KiB of one output, cut after a newline where there is one.

    ``first_line`` is the 1-based number of the line holding the chunk's first
    byte (newlines before the chunk + 1); ``line_count`` counts the newlines in
    it. The line L starts right after newline L-1, which lies in the chunk with
    the greatest ``first_line < L`` — one indexed lookup, wherever L is.
    """

    output = models.ForeignKey(ToolOutput, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    first_line = models.PositiveBigIntegerField()
    line_count = models.PositiveIntegerField()
    byte_offset = models.PositiveBigIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["output", "index"], name="uniq_chunk_output_index")
        ]
        indexes = [
            models.Index(fields=["output", "first_line", "index"], name="chunk_output_line_idx"),
        ]
        ordering = ["output", "index"]

    def __str__(self) -> str:
        return f"{self.output_id}[{self.index}] from line {self.first_line}"


from .models_audit import PolicyChange  # noqa: E402,F401  (one app, models in two modules)
from .models_calls import ContextCall  # noqa: E402,F401  (one app, two modules)
from .models_recall import RecallSegment, RecallState  # noqa: E402,F401  (one app, three modules)
from .models_search import MessageSearch  # noqa: E402,F401  (one app, four modules)
