"""Our compaction answers the client's: Codex's checkpoint request and the API's server-side forms.

Three ways a Responses client compacts, each answered by a contextsvc
compaction run (trigger ``client``: the same run records, retention check
and dashboard card as the REST API's compactions), with no upstream call:

- **a local checkpoint**: Codex sends an ordinary request whose last user
  message begins "You are performing a CONTEXT CHECKPOINT COMPACTION"; it
  gets our summary of the history as the assistant's answer. The restart that
  follows (a new history starting with the summary) is the sync's divergence
  rule: nothing stored is lost.
- **a compaction trigger**: a request whose input ends with a
  ``compaction_trigger`` item gets a ``compaction`` item whose opaque
  ``encrypted_content`` is our token for the summary (``compaction_token``).
- **``POST /responses/compact``**: answered ``{"object":
  "response.compaction", "output": [the user messages..., the compaction
  item]}``.

Sent back, a compaction item of ours is expanded into the summary before
anything goes upstream (``responses_body.units_to_transcript``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from compaction import reasons
from compaction.models import CompactionRun
from compaction.services.requests import compaction_request
from compaction.services.sync import compaction_run_sync
from contextsvc.engine.providers.openai_responses import item_kind
from contextsvc.engine.providers.openai_responses_reply import response_object
from contextsvc.errors import ValidationFailed
from sessions.models import Session

from ..providers.compaction_token import compaction_token

CHECKPOINT = "You are performing a CONTEXT CHECKPOINT COMPACTION"


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):  # checked where the item is converted, not here
        return ""
    return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))


def compaction_kind(body: dict[str, Any]) -> str | None:
    """``"checkpoint"`` / ``"trigger"`` when the request asks for a compaction, else None."""
    items = body.get("input")
    if not isinstance(items, list) or not items or not isinstance(items[-1], dict):
        return None
    last = items[-1]
    if last.get("type") == "compaction_trigger":
        return "trigger"
    if item_kind(last) == "message" and last.get("role") == "user":
        if _text(last).lstrip().startswith(CHECKPOINT):
            return "checkpoint"
    return None


def without_request(body: dict[str, Any]) -> dict[str, Any]:
    """The body without its compaction request (the last item): the history to sync."""
    return {**body, "input": body["input"][:-1]}


def session_compact_for_client(*, session: Session, form: str) -> str | None:
    """Compact the whole live window now (a ``client`` run); the summary, or None if there is none.

    ``form``: how the client asked (``compaction_kind``'s checkpoint or trigger, or
    compact for ``POST /responses/compact``), kept in the run's reason."""
    try:
        run, _ = compaction_request(
            session=session,
            trigger=CompactionRun.Trigger.CLIENT,
            reason=reasons.client(session, form),
            retain_last_turns=0,
            enqueue=False,
        )
    except ValidationFailed:  # nothing to compact
        return None
    run = compaction_run_sync(run=run)
    summary = Session.objects.values_list("summary", flat=True).get(pk=session.pk)
    if run.status != CompactionRun.Status.SUCCEEDED or not summary:
        return None
    return summary


def _compaction_item(session: Session, summary: str) -> dict[str, Any]:
    token = compaction_token(session_id=session.external_id, summary=summary)
    return {"id": f"cmp_{uuid.uuid4().hex}", "type": "compaction", "encrypted_content": token}


def compaction_answer(*, kind: str, session: Session, summary: str, model: str) -> dict[str, Any]:
    """The ``response`` answering a checkpoint (the summary as text) or a trigger (the item)."""
    if kind == "checkpoint":
        text = {"type": "output_text", "text": summary, "annotations": [], "logprobs": []}
        item = {
            "id": f"msg_cs_{uuid.uuid4().hex}",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [text],
        }
    else:
        item = _compaction_item(session, summary)
    return response_object(
        response_id=f"resp_cs_{uuid.uuid4().hex}",
        model=model,
        output=[item],
        created_at=int(time.time()),
    )


def compacted_response(*, body: dict[str, Any], session: Session, summary: str) -> dict[str, Any]:
    """``POST /responses/compact``'s answer: the user messages, then one compaction item."""
    items = body.get("input") if isinstance(body.get("input"), list) else []
    users = [
        {"type": "message", **item}
        for item in items
        if item_kind(item) == "message" and item.get("role") == "user"
    ]
    empty = response_object(response_id="", model="", output=[], created_at=0)["usage"]
    return {
        "id": f"cmp_{uuid.uuid4().hex}",
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*users, _compaction_item(session, summary)],
        "usage": empty,
    }
