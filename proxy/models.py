"""What the proxy remembers per session: the client's view of its history, as chain hashes."""

from __future__ import annotations

from django.db import models

from sessions.models import Session


class ClientView(models.Model):
    """The client's view on its last call: how many messages, and their chain hash.

    ``chain`` is the chain hash (``engine.providers.fingerprint.chain_next``)
    of the ``count`` messages the client sent plus the reply it got, so a
    grown history is checked against it in one comparison whatever the
    session's length. ``reply_at`` is the index of that reply, or None, and
    ``reply_chain`` the chain before it: the reply is what the proxy stored,
    and the client echoes it re-serialised by its SDK, so an assistant message
    in that place is taken as the echo (``services.sync``). The per-message
    chains (``ClientViewEntry``) are read only when the view diverges, to find
    the common prefix. ``renamed`` maps tool-call ids of the client's view to
    the ids stored for them by a divergence of the time when a re-appended
    view could not reuse a session's ids (``<id>_v<n>``); a divergence now
    stores ids as sent and empties it.
    """

    session = models.OneToOneField(Session, on_delete=models.CASCADE, related_name="client_view")
    count = models.PositiveIntegerField(default=0)
    chain = models.CharField(max_length=64, blank=True, default="")
    reply_at = models.IntegerField(null=True, blank=True)
    reply_chain = models.CharField(max_length=64, blank=True, default="")
    renamed = models.JSONField(default=dict, blank=True)
    divergences = models.PositiveIntegerField(default=0)
    # The client's last request as sent: its message count, the chain after
    # them and the digest of their JSON (``fingerprint.json_digests``). A next
    # request whose first ``raw_count`` messages have that digest is only
    # fingerprinted past them (``fingerprint.ClientChains``).
    raw_count = models.PositiveIntegerField(default=0)
    raw_chain = models.CharField(max_length=64, blank=True, default="")
    raw_digest = models.CharField(max_length=40, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"client view of {self.session_id} ({self.count} messages)"


class ClientViewEntry(models.Model):
    """The chain hash of a client's view after its message ``index``.

    Written once per message the client sends (an upsert: a later view
    rewrites the entries from where it differs), never read on the common
    path. Entries at or past the view's ``count`` are leftovers of a longer
    view and are ignored; the reply's place has no entry until the client
    echoes it.
    """

    view = models.ForeignKey(ClientView, on_delete=models.CASCADE, related_name="entries")
    index = models.PositiveIntegerField()
    chain = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["view", "index"], name="proxy_view_entry_unique")
        ]

    def __str__(self) -> str:
        return f"entry {self.index} of view {self.view_id}"


class ClientCompaction(models.Model):
    """A divergence of the client's view (it compacted or edited its own history).

    The proxy appended a marker at ``marker_seq`` and the live window restarted
    just after it; the dashboard's usage chart marks it as a client compaction
    (``selectors.window_events``).
    """

    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="client_compactions"
    )
    marker_seq = models.PositiveIntegerField()
    at_message = models.PositiveIntegerField()  # the client's first changed message
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"client compaction of {self.session_id} at seq {self.marker_seq}"


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
