"""The transcript sync: append only what the client's history adds since its last call.

A client sends its whole history on every call. The proxy keeps the chain
hash of what it sent last (``ClientView``, plus the reply it got) and
appends, through the REST API's append service, only the messages after the
longest common prefix: one comparison when the history only grew; the
per-message entries are read when it did not.

Two cases are not divergences:

- the reply echoed back: an assistant message in the reply's place is the
  reply the proxy stored, whatever its SDK changed in serialising it;
- a retry: the client sends again what it sent before, without the reply
  (it lost the answer, or wants another): nothing is new; the stored reply
  stays in the transcript.

**Divergence** (the client changed a message it had sent: it compacted or
edited its own history, or retried with other content) follows one rule that
loses nothing: the stored transcript is kept whole; a marker message is
appended, then the client's whole new view, and the session's live window
restarts just after the marker — at the first message of the new view.
Tool-call ids of the new view are re-numbered (``<id>_v<n>``) because a
session never reuses a tool-call id; ``ClientView.renamed`` keeps the mapping
so later results for those calls still match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from compaction.services.window import set_window
from contextsvc.engine.providers.fingerprint import chain_hashes, chain_next, fingerprints
from contextsvc.engine.strategies.base import TokenCounter
from sessions import accounting, hotpath
from sessions.models import Session
from sessions.services.append import session_append_messages
from sessions.services.inputs import MessageData

from ..models import ClientView, ClientViewEntry
from ..selectors import match_view

MARKER = (
    "[contextsvc proxy: the client's history changed at its message {at} (it compacted or "
    "edited it); the messages before this marker are the session's earlier record, the live "
    "window restarts with the client's new view after it.]"
)


@dataclass(frozen=True, slots=True)
class Synced:
    """What a sync did: messages appended, and whether the client's history diverged."""

    appended: int
    diverged: bool


def _rename(messages: list[dict[str, Any]], renamed: dict[str, str]) -> list[dict[str, Any]]:
    if not renamed:
        return messages
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**call, "id": renamed.get(call["id"], call["id"])}
                for call in message["tool_calls"]
            ]
        if message.get("tool_call_id") in renamed:
            message["tool_call_id"] = renamed[message["tool_call_id"]]
        out.append(message)
    return out


def _append(session: Session, messages: list[dict[str, Any]]) -> int:
    """Append in batches the API accepts; the seq of the last message appended."""
    size = settings.CONTEXTSVC_MAX_BATCH
    last_seq = 0
    for start in range(0, len(messages), size):
        batch: list[MessageData] = messages[start : start + size]  # type: ignore[assignment]
        last_seq = session_append_messages(session=session, messages=batch)["messages"][-1]["seq"]
    return last_seq


def _restart_window(session: Session, start_seq: int) -> None:
    """The live window starts at ``start_seq`` (caller is in a transaction)."""
    session = hotpath.lock_session(session.pk)
    counter = TokenCounter(accounting.tokenizer_of(session), accounting.estimate_config_of(session))
    set_window(
        session,
        retain=session.retain,
        summary=session.summary,
        start_seq=start_seq,
        counter=counter,
    )
    session.save()


def _write_view(view: ClientView, chains: list[str], same: int) -> None:
    """The view becomes ``chains``; its entries are rewritten from ``same`` on (the rest hold)."""
    entries = [
        ClientViewEntry(view=view, index=i, chain=chains[i]) for i in range(same, len(chains))
    ]
    if entries:
        ClientViewEntry.objects.bulk_create(
            entries, update_conflicts=True, unique_fields=["view", "index"], update_fields=["chain"]
        )
    view.count = len(chains)
    view.chain = chains[-1] if chains else ""
    view.reply_at = None
    view.reply_chain = ""
    view.save()


def session_sync_client_view(
    *,
    session: Session,
    messages: Sequence[dict[str, Any]],
    to_transcript: Callable[[list[dict[str, Any]], int], list[dict[str, Any]]],
) -> Synced:
    """Append what ``messages`` (the client's history, provider format) adds; record the view.

    ``to_transcript(slice, offset)`` converts a slice of the client's messages
    that starts at ``offset``. The work does not grow with the session: the
    view is one row (its chain hash), and only the new messages are written.
    """
    chains = chain_hashes(fingerprints(messages))
    with transaction.atomic():
        view, _ = ClientView.objects.select_for_update().get_or_create(session=session)
        match = match_view(view, chains, messages)
        prefix = match.prefix
        retry = view.reply_at is not None and prefix == view.reply_at == len(chains)
        diverged = prefix < match.stored and not retry
        renamed = dict(view.renamed or {})
        if diverged:
            view.divergences += 1
            new = to_transcript(list(messages), 0)
            for message in new:
                for call in message.get("tool_calls") or ():
                    renamed[call["id"]] = f"{call['id']}_v{view.divergences}"
            marker = {"role": "user", "content": MARKER.format(at=prefix)}
            marker_seq = _append(session, [marker])
            new = _rename(new, renamed)
            if new:
                _append(session, new)
            _restart_window(session, marker_seq + 1)
        else:
            new = _rename(to_transcript(list(messages[prefix:]), prefix), renamed)
            if new:
                _append(session, new)
        view.renamed = renamed
        _write_view(view, chains, match.same)
    return Synced(appended=len(new), diverged=diverged)


def client_view_add_reply(*, session: Session, fingerprint: str) -> None:
    """Record the reply the client got, as the next message of its view (one row, no entry)."""
    with transaction.atomic():
        view, _ = ClientView.objects.select_for_update().get_or_create(session=session)
        view.reply_at = view.count
        view.reply_chain = view.chain
        view.chain = chain_next(view.chain, fingerprint)
        view.count += 1
        view.save()
