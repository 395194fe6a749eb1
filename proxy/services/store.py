"""The proxy as the Responses store: record what it relayed, serve and delete it.

Upstream is always called statelessly; a client's ``store`` /
``previous_response_id`` / ``GET`` / ``DELETE`` work against these records
(``models.StoredResponse``), so any upstream — vLLM, Ollama — gets
conversation state it never had. A record keeps one response (one turn's
output), so its size does not grow with the session.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from contextsvc.errors import NotFound
from sessions.models import AgentKey, Session

from ..models import ClientView, StoredResponse


def stored_response_add(*, session: Session, response: dict[str, Any], stored: bool) -> None:
    """Record a relayed response as the head of its conversation (the client view's length now)."""
    response_id = response.get("id")
    if not isinstance(response_id, str) or not response_id:
        return
    with transaction.atomic():
        view_len = (
            ClientView.objects.filter(session=session).values_list("count", flat=True).first() or 0
        )
        StoredResponse.objects.create(
            session=session,
            response_id=response_id,
            response=response,
            view_len=view_len,
            stored=stored,
        )


def stored_response_get(*, owner: AgentKey, response_id: str) -> StoredResponse:
    """The caller's stored response (another key's, or one not stored, is not found)."""
    record = (
        StoredResponse.objects.filter(session__owner=owner, response_id=response_id, stored=True)
        .select_related("session")
        .order_by("-id")
        .first()
    )
    if record is None:
        raise NotFound(f"Response with id '{response_id}' not found.")
    return record


def is_head(record: StoredResponse) -> bool:
    """Whether the client view still ends with this response (nothing sent after it)."""
    latest = StoredResponse.objects.filter(session_id=record.session_id).order_by("-id").first()
    view = ClientView.objects.filter(session_id=record.session_id).values_list("count", flat=True)
    view_len = view.first() or 0
    return latest is not None and latest.pk == record.pk and view_len == record.view_len


def stored_response_delete(*, owner: AgentKey, response_id: str) -> None:
    """Forget a response (the transcript keeps the turn: it is the session's record)."""
    record = stored_response_get(owner=owner, response_id=response_id)
    StoredResponse.objects.filter(session_id=record.session_id, response_id=response_id).update(
        stored=False
    )
