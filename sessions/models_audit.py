"""Who changed a session's settings, and how: the audit lines of the inspector's timeline."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class PolicyChange(models.Model):
    """One change of a session's policy (an operator's form or the API's PATCH).

    ``after_seq`` is the session's last message when the change was made: the
    timeline shows the line right after that message, so an operator reading
    the transcript sees from where on the new policy applied.
    """

    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="policy_changes"
    )
    actor = models.CharField(max_length=200)  # "operator alice", "agent key ci-bot"
    after_seq = models.PositiveIntegerField(default=0)
    # [{"field": "compaction.auto", "old": true, "new": false}], leaf by leaf.
    changes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["session", "after_seq"], name="policy_change_session_seq_idx")
        ]
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return f"{self.session_id}@{self.after_seq} by {self.actor}"
