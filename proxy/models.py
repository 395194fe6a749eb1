"""What the proxy remembers per session: the client's view of its history, as fingerprints."""

from __future__ import annotations

from django.db import models

from sessions.models import Session


class ClientView(models.Model):
    """The fingerprints of the messages a client sent (and the reply it got) on its last call.

    ``reply_at`` is the index of the reply's fingerprint, or None: the reply is
    what the proxy stored, and the client echoes it re-serialised by its SDK, so
    an assistant message in that place is taken as the echo (``services.sync``).
    ``renamed`` maps tool-call ids of the client's view to the ids stored for
    them after a divergence (a re-appended view may not reuse a session's ids).
    """

    session = models.OneToOneField(Session, on_delete=models.CASCADE, related_name="client_view")
    fingerprints = models.JSONField(default=list, blank=True)
    reply_at = models.IntegerField(null=True, blank=True)
    renamed = models.JSONField(default=dict, blank=True)
    divergences = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"client view of {self.session_id} ({len(self.fingerprints)} messages)"


class StoredResponse(models.Model):
    """A Responses API answer the proxy relayed: the proxy is the store (``services.store``).

    Upstream is called statelessly (``store: false``); the client's ``store``
    and ``previous_response_id`` work against this table, so any upstream gets
    conversation state. ``view_len`` is the length of the client view after
    this response: the response is the head of its conversation while the
    view has that length. ``stored`` is the client's ``store`` flag (a
    response it did not ask to store is not served by GET, nor continued).
    """

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="responses")
    response_id = models.CharField(max_length=128, db_index=True)
    response = models.JSONField(default=dict)
    view_len = models.PositiveIntegerField(default=0)
    stored = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["session", "-id"], name="proxy_resp_session_latest")]

    def __str__(self) -> str:
        return f"response {self.response_id} of {self.session_id}"
