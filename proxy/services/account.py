"""A proxied call's account: the client's request beside what was sent (docs/proxy.md#what-changed).

``ClientSide`` is what the call's preparation learned on its way — how many
messages the client sent, how many its previous request already had, which
were new and where the transcript holds them — at no extra reading. ``call_account`` adds what the two
bodies show (``engine.request_account``) when the build's record is written,
after the call's first byte; it is kept as ``ContextCall.request``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from contextsvc.engine import request_account as account
from contextsvc.engine.providers.common import Converted
from sessions.models import Session

from .sync import Synced

log = logging.getLogger("contextsvc.proxy")

# Cache markers are looked for on the newest messages only (the ones that move
# from call to call): the client's from a few before those its previous request
# had, ours on the last few (``engine.prompt`` marks the newest history block).
MOVING = 4


@dataclass(frozen=True, slots=True)
class ClientSide:
    """The client's request as its call's preparation saw it (module doc)."""

    body: dict[str, Any]
    messages: int  # the conversation messages (or Responses input items) it carried
    same: int  # of them, the leading ones its previous request had too
    appended: int  # written to the transcript by this call
    new_seqs: tuple[int, int] | None  # where they are (first, last seq)
    diverged: bool  # it changed a message it had sent (the proxy marked a client compaction)
    open_calls: bool = True  # the transcript has tool calls left unanswered


def client_side(
    *,
    body: dict[str, Any],
    messages: int,
    synced: Synced,
    session: Session,
    same: int | None = None,
) -> ClientSide:
    """``ClientSide`` of a synced request; ``session`` as read after the sync;
    ``same``: the common prefix with the previous request when the sync planned one."""
    last_seq = session.last_seq
    appended = synced.appended
    if same is None:
        same = 0 if synced.diverged else max(messages - appended, 0)
    return ClientSide(
        body=body,
        messages=messages,
        same=same,
        appended=appended,
        new_seqs=(last_seq - appended + 1, last_seq) if appended else None,
        diverged=synced.diverged,
        open_calls=bool(session.open_tool_calls),
    )


def call_account(
    client: ClientSide, converted: Converted, sent: dict[str, Any], *, final: bool
) -> dict[str, Any] | None:
    """The account kept with the build's record; None (logged) if it cannot be made,
    so a record is never refused for its account."""
    try:
        return _account(client, converted, sent, final=final)
    except Exception:
        log.exception("proxy: could not account for the client's request")
        return None


def _account(
    client: ClientSide, converted: Converted, sent: dict[str, Any], *, final: bool
) -> dict[str, Any]:
    body = client.body
    tools = account.tool_names(body.get("tools") or ())
    sent_history = sent.get("messages", sent.get("input"))
    if not isinstance(sent_history, list):
        sent_history = []
    return {
        "client": {
            "messages": client.messages,
            "same_as_previous": client.same,
            "appended": client.appended,
            "new_seqs": list(client.new_seqs) if client.new_seqs else None,
            "diverged": client.diverged,
            "system": {
                "digest": account.digest([[s.name, s.content] for s in converted.sections]),
                "sections": [s.name for s in converted.sections],
                "chars": sum(len(s.content) for s in converted.sections),
            },
            "tools": {"digest": account.digest(body.get("tools") or []), "names": tools},
            "fields": list(body),
        },
        "changes": {
            "fields": account.field_changes(body, sent),
            "tools": account.tool_changes(
                tools, account.tool_names(sent.get("tools") or ()), final=final
            ),
            "cache": {
                "client": account.cache_marks(body, first=max(client.same - MOVING, 0)),
                "sent": account.cache_marks(sent, first=max(len(sent_history) - MOVING, 0)),
            },
            "synthetic": account.synthetic(sent_history, open_calls=client.open_calls),
        },
    }
