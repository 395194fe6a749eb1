"""The transcript's full-text index (the inspector's finder), kept beside the messages.

A message's words are indexed when its session is first searched, not when
it is appended: an index on the message table itself made PostgreSQL work out
every message's tsvector inside the append, the largest cost of an append
that nobody may ever search (``services.search_index``).
"""

from __future__ import annotations

from django.contrib.postgres.search import SearchVectorField
from django.db import models


class MessageSearch(models.Model):
    """One message's searchable words: (session, seq) names the message."""

    # No index of its own: the unique (session, seq) leads with it.
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    seq = models.PositiveIntegerField()
    # GIN-indexed on PostgreSQL (migration 0020); SQLite has no such search.
    document = SearchVectorField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="uniq_message_search_seq")
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} words"
