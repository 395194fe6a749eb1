"""Per-session state of prompt caching and tool deferral (docs/concepts/caching.md#breakpoints).

One row per session, created on first use. The fields are split by writer so
that concurrent writers never overwrite each other's data with a plain
``UPDATE … SET`` of their own columns:

- ``session_set_tools`` writes the tool index (per-tool token counts and digests);
- each context build writes the LRU it learned, the frozen deferral selection,
  the cache accounting of that build and its degradation errors;
- ``tool_search`` writes what was searched and loaded.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class PromptState(models.Model):
    session = models.OneToOneField(
        "agent_sessions.Session",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="prompt_state",
    )

    # --- written by session_set_tools ------------------------------------------------
    # {name: [tokens, digest]}: estimate_tool_def counted once, never per request.
    tool_index = models.JSONField(default=dict, blank=True)
    tools_hash = models.CharField(max_length=32, blank=True, default="")

    # --- written by context builds --------------------------------------------------
    # Tool LRU learned from the assistant tool_calls the agent posts: {name: seq}.
    tool_last_used = models.JSONField(default=dict, blank=True)
    # Messages up to this seq have been scanned for tool_calls.
    scanned_seq = models.PositiveIntegerField(default=0)
    # The deferral choice, frozen for a turn so the tool list (the first part of
    # every cached prefix) does not move while the agent loops inside a turn:
    # {turn, tools_hash, limit, scale, deferred: [names]}.
    selection = models.JSONField(default=dict, blank=True)
    # Snapshot of the last build's deferral figures (shown by GET budget).
    last_deferral = models.JSONField(default=dict, blank=True)
    tokens_saved_total = models.PositiveBigIntegerField(default=0)
    # Cache accounting: the previous build's chain of block digests, the block
    # indices holding a cache entry after it, and when/how it was built.
    last_chain = models.BinaryField(default=b"", blank=True)
    # Names the chain above (its last digest and block count; "" for none), read with
    # the row while the chain is read only when needed (``services.chain``).
    chain_tag = models.CharField(max_length=40, blank=True, default="")
    last_cached = models.JSONField(default=list, blank=True)
    last_mode = models.CharField(max_length=16, blank=True, default="")
    last_built_at = models.DateTimeField(null=True, blank=True)
    last_build = models.JSONField(default=dict, blank=True)
    # Running sums over builds: {builds, input_tokens, cache_read_tokens, …}.
    cache_totals = models.JSONField(default=dict, blank=True)
    # docs/concepts/caching.md#degradation: the last build's failures, and a short history of them.
    degraded = models.JSONField(default=list, blank=True)
    degraded_log = models.JSONField(default=list, blank=True)

    # --- written by tool_search ------------------------------------------------------
    # Promoted for the rest of the turn: {name: seq at load}; valid while no user
    # message came after that seq.
    loaded = models.JSONField(default=dict, blank=True)
    searched = models.JSONField(default=dict, blank=True)  # {name: times returned}
    loaded_total = models.JSONField(default=dict, blank=True)  # {name: times loaded}
    search_count = models.PositiveIntegerField(default=0)
    recent_searches = models.JSONField(default=list, blank=True)

    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "prompt state"

    def __str__(self) -> str:
        return f"prompt state of session {self.session_id}"
