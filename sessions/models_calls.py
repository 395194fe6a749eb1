"""One row per context build (``ContextCall``): what was sent, as sent.

Written by the one context service on every ``GET /context`` and every proxy
call, completed by the next usage report. Pages that show past turns (usage
chart, cost, "what was sent at turn N") read these rows, never today's
messages: a trim or a compaction rewrites the messages' views, not history.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone


class ContextCall(models.Model):
    class Source(models.TextChoices):
        API = "api"
        PROXY = "proxy"

    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="calls"
    )
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.API)
    format = models.CharField(max_length=16)
    model = models.CharField(max_length=200)
    # The live messages sent: first and last seq (0 when none).
    first_seq = models.PositiveIntegerField(default=0)
    through_seq = models.PositiveIntegerField(default=0)
    message_count = models.PositiveIntegerField(default=0)
    guard_status = models.CharField(max_length=10)
    effective_window = models.PositiveIntegerField(default=0)
    compact_at = models.PositiveIntegerField(default=0)
    # Our estimate of the input as sent ("used" at build time).
    estimated_input = models.PositiveIntegerField(default=0)
    # {system_prompt, skill_prompts, tool_descriptions, summary, conversation, outputs}
    components = models.JSONField(default=dict)
    # Per item, as sent: {sections, tools, deferred, largest, placeholders}; one
    # JSON value rather than per-item rows keeps the write to one INSERT.
    breakdown = models.JSONField(default=dict)
    # [{label, prefix_tokens}] in the provider's cache order.
    breakpoints = models.JSONField(default=list)
    cache_read_estimated = models.PositiveIntegerField(default=0)
    cache_write_estimated = models.PositiveIntegerField(default=0)
    # The profile's prices at build time (USD per million tokens, and the cache TTL).
    prices = models.JSONField(null=True, blank=True)
    build_ms = models.FloatField(default=0.0)
    created_at = models.DateTimeField(default=timezone.now)

    # "call": a build that goes to a model, priced; "read": a preview or read
    # of the context (``GET /context`` without ``purpose=call``), never priced.
    purpose = models.CharField(max_length=8, default="call")

    # The upstream outcome (proxy calls): the status the provider answered and
    # the one the client got, the provider's error type and message, retries,
    # a stream cut off after ``stream_events`` events, time to first byte and
    # in total. ``failed``: the model call did not complete.
    upstream_status = models.PositiveSmallIntegerField(null=True, blank=True)
    client_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error_type = models.CharField(max_length=100, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    retries = models.PositiveSmallIntegerField(default=0)
    stream_cut = models.BooleanField(default=False)
    stream_events = models.PositiveIntegerField(null=True, blank=True)
    ttfb_ms = models.FloatField(null=True, blank=True)
    total_ms = models.FloatField(null=True, blank=True)
    failed = models.BooleanField(default=False)

    # A proxied call: what the client's request carried beside what was sent
    # (``contextsvc.engine.request_account``, docs/proxy.md#what-changed); None otherwise.
    request = models.JSONField(null=True, blank=True)

    # Completed by the usage report that follows (``/usage`` or the proxy's reply).
    completed_at = models.DateTimeField(null=True, blank=True)
    reported_input = models.PositiveIntegerField(null=True, blank=True)
    reported_output = models.PositiveIntegerField(null=True, blank=True)
    cache_read = models.PositiveIntegerField(null=True, blank=True)
    cache_write = models.PositiveIntegerField(null=True, blank=True)
    # USD from the model profile's prices (None: no price known): estimated at
    # build, replaced by the reported usage's cost; and what it would cost
    # without any caching (the saving is the difference).
    cost_usd = models.FloatField(null=True, blank=True)
    cost_without_cache_usd = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [
            # Covering: the inspector's figures over every record of a session
            # (cost totals, the chart's largest build per bar, the trend) are
            # index-only scans, not reads of the wide rows (breakdown JSON).
            models.Index(
                fields=["session", "id"],
                name="contextcall_session_cover",
                include=[
                    "through_seq",
                    "estimated_input",
                    "completed_at",
                    "cost_usd",
                    "cost_without_cache_usd",
                ],
            ),
            models.Index(fields=["created_at"], name="contextcall_created_idx"),
            # The failed calls of a session (the list's filter, the inspector's marks).
            models.Index(
                fields=["session", "id"],
                name="contextcall_failed_idx",
                condition=models.Q(failed=True),
            ),
        ]
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return f"{self.session_id} call {self.pk} through #{self.through_seq}"

    @property
    def reported_total_input(self) -> int | None:
        """Provider-reported input: uncached + cache writes + cache reads."""
        if self.reported_input is None:
            return None
        return self.reported_input + (self.cache_read or 0) + (self.cache_write or 0)

    @property
    def saved_usd(self) -> float | None:
        if self.cost_usd is None or self.cost_without_cache_usd is None:
            return None
        return round(self.cost_without_cache_usd - self.cost_usd, 6)

    @property
    def price_source(self) -> dict[str, Any] | None:
        """Which profile's prices priced the call, and who set them when (None: not kept,
        or no price); ``set_at`` None: the published prices."""
        source = (self.prices or {}).get("source")
        if not source:
            return None
        at = source.get("set_at")
        return {**source, "set_at": datetime.fromisoformat(at) if at else None}

    @property
    def latency_ms(self) -> float | None:
        """From the build to the usage report: the model call's round trip, as seen here."""
        if self.completed_at is None:
            return None
        return round((self.completed_at - self.created_at).total_seconds() * 1000, 1)
