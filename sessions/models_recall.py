"""The recall index: everything a session ever held, searchable (docs/tool-output-cache.md, "Reaching what left the context").

``RecallSegment`` rows hold the text of the transcript in small pieces of
whole lines: every message's text and tool calls, every stored tool output in
full (decoded), and every summary a compaction wrote. On PostgreSQL two GIN
indexes cover them (trigram, for substrings and regular expressions, and
full-text, for words in any order; migration 0017), each led by the session,
so a search reads the index, never the session's rows one by one.

The index is written off the append path: ``RecallState.indexed_seq`` says
how far a session's messages are in it, and a search, a compaction or the
periodic sweep indexes the rest first (``sessions.recall.index``).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class RecallSegment(models.Model):
    class Source(models.TextChoices):
        MESSAGE = "message"
        OUTPUT = "output"
        SUMMARY = "summary"

    # No index of its own: migration 0017's indexes lead with it.
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    # The message it came from; an output's first message; a summary's last summarised seq.
    seq = models.PositiveIntegerField()
    source = models.CharField(max_length=8, choices=Source.choices)
    role = models.CharField(max_length=10, blank=True, default="")
    tool_name = models.CharField(max_length=200, blank=True, default="")
    ref = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001  (no ref: not an output)
    # Collected with its output (GC): a hit always names a ref that can still be read.
    output = models.ForeignKey(
        "agent_sessions.ToolOutput", null=True, blank=True, on_delete=models.CASCADE,
        related_name="+",
    )  # fmt: skip
    first_line = models.PositiveBigIntegerField(default=1)
    text = models.TextField()

    class Meta:
        # Migration 0017 adds the search's indexes: on PostgreSQL the GIN ones,
        # and on both an index of (session_id + 0, seq DESC, id) for the walk
        # newest first. The "+ 0" is deliberate: a plain (session, seq) index
        # would be the planner's pick for "this session's rows, filtered by the
        # text", a scan of every segment of a large session; written this way
        # only the newest-first walk, which asks for it, can use it.
        indexes = [models.Index(fields=["output"], name="recall_output_idx")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.source}:{self.first_line}"


class RecallState(models.Model):
    """How far a session's messages are in the recall index."""

    session = models.OneToOneField(
        "agent_sessions.Session", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    indexed_seq = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.session_id} indexed through {self.indexed_seq}"
