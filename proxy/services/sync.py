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
restarts just after the marker — at the first message of the new view — and
a ``ClientCompaction`` row marks it on the dashboard's usage chart.
The new view is stored as the client sent it, tool-call ids included: the
calls still open in the earlier record are closed first (they lie before the
new window, so no result can answer them any more), which leaves the new
view's ids free, as after any answered call. ``ClientView.renamed`` is the
mapping of views that diverged when ids were still renumbered
(``<id>_v<n>``): applied to their later messages so results still find
their calls, and dropped at the next divergence, which re-sends everything
the window holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from compaction.services.window import set_window
from contextsvc.engine.providers.fingerprint import ClientChains, chain_next
from contextsvc.engine.strategies.base import TokenCounter
from sessions import accounting, hotpath
from sessions.models import Session
from sessions.services.append import session_append_messages
from sessions.services.inputs import MessageData

from ..models import ClientCompaction, ClientView, ClientViewEntry
from ..selectors import Match, client_chains, match_view

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
    # The view after the sync (its length and chain), for the reply's one-statement update.
    count: int = -1
    chain: str = ""


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
        # No savepoint: any error rolls the whole sync back (two round trips fewer).
        appended = session_append_messages(session=session, messages=batch, savepoint=False)
        last_seq = appended["messages"][-1]["seq"]
    return last_seq


def _close_open_calls(session: Session) -> None:
    """The record's unanswered calls are abandoned: the window restarts after them
    (caller is in a transaction; the next append re-reads the row under its lock)."""
    locked = hotpath.lock_session(session.pk, exclude=hotpath.HEAVY_FIELDS)
    if locked.open_tool_calls:
        locked.open_tool_calls = {}
        hotpath.save_fields(locked, ("open_tool_calls",))


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


def _write_entries(view_pk: int, chains: ClientChains, same: int) -> None:
    """The view's entries are rewritten from ``same`` on (the rest hold)."""
    after = chains.after(same)
    entries = [
        ClientViewEntry(view_id=view_pk, index=same + k, chain=c) for k, c in enumerate(after)
    ]
    if entries:
        ClientViewEntry.objects.bulk_create(
            entries, update_conflicts=True, unique_fields=["view", "index"], update_fields=["chain"]
        )


def _view_fields(chains: ClientChains) -> dict[str, Any]:
    """The view's fields once it is ``chains`` (the client's request just synced)."""
    return {
        "count": len(chains),
        "chain": chains.last(),
        "reply_at": None,
        "reply_chain": "",
        "raw_count": len(chains) if chains.digest else 0,
        "raw_chain": chains.last() if chains.digest else "",
        "raw_digest": chains.digest,
    }


def _write_view(view: ClientView, chains: ClientChains, same: int) -> None:
    """The view becomes ``chains``; its entries are rewritten from ``same`` on (the rest hold)."""
    _write_entries(view.pk, chains, same)
    for name, value in _view_fields(chains).items():
        setattr(view, name, value)
    view.save()


ToTranscript = Callable[[list[dict[str, Any]], int], list[dict[str, Any]]]


def _state(view: ClientView | None) -> tuple[Any, ...]:
    """What a plan depends on: a sync between the plan and its lock means planning again."""
    if view is None:
        return (0, "", None, "", 0)
    return (view.count, view.chain, view.reply_at, view.reply_chain, view.divergences)


@dataclass(slots=True)
class SyncPlan:
    """A sync worked out before any write: the match and the new messages, converted.

    Converting what is new is the validation of the client's history (a bad
    message raises ``ConversionError`` before anything is written); what the
    view already holds was converted on the call that sent it.
    """

    messages: Sequence[dict[str, Any]]
    chains: ClientChains
    match: Match
    state: tuple[Any, ...]
    diverged: bool
    new: list[dict[str, Any]]
    view_pk: int | None = None  # the view planned against (None: the client's first call)
    renamed: dict[str, str] | None = None  # its renamed tool-call ids


def matched(
    view: ClientView | None, messages: Sequence[dict[str, Any]], to_transcript: ToTranscript
) -> tuple[ClientChains, Match]:
    """The client's chains and their match with ``view``; a message the fingerprint cannot
    read (nested past its recursion) is refused by the checks of the conversion, naming it."""
    try:
        chains = client_chains(view, messages)
        return chains, match_view(view, chains, messages)
    except (RecursionError, ValueError, TypeError):
        to_transcript(list(messages), 0)  # raises the refusal naming the message
        raise


def plan_client_sync(
    *, view: ClientView | None, messages: Sequence[dict[str, Any]], to_transcript: ToTranscript
) -> SyncPlan:
    """Match ``messages`` with ``view`` and convert what the session does not hold (module doc)."""
    chains, match = matched(view, messages, to_transcript)
    prefix = match.prefix
    retry = (
        view is not None and view.reply_at is not None and prefix == view.reply_at == len(chains)
    )
    diverged = prefix < match.stored and not retry
    if diverged:
        new = to_transcript(list(messages), 0)
    else:
        if match.same < prefix:  # the echoed reply: not appended, but it must be valid
            to_transcript(list(messages[match.same : prefix]), match.same)
        new = to_transcript(list(messages[prefix:]), prefix)
    if view is None:
        return SyncPlan(messages, chains, match, _state(view), diverged, new)
    renamed = dict(view.renamed or {})
    return SyncPlan(messages, chains, match, _state(view), diverged, new, view.pk, renamed)


def session_sync_client_view(
    *,
    session: Session,
    messages: Sequence[dict[str, Any]],
    to_transcript: ToTranscript,
    plan: SyncPlan | None = None,
) -> Synced:
    """Append what ``messages`` (the client's history, provider format) adds; record the view.

    ``to_transcript(slice, offset)`` converts a slice of the client's messages
    that starts at ``offset``. ``plan`` (``plan_client_sync``, made before the
    call's first write) is used when the view has not changed since. The work
    does not grow with the session: the view is one row, only the messages
    past the client's previous request are fingerprinted and converted, and
    only the new ones are written.
    """
    with transaction.atomic():
        if plan is not None and (synced := _sync_as_planned(session, plan)) is not None:
            return synced
        view, _ = ClientView.objects.select_for_update().get_or_create(session=session)
        if plan is None or plan.state != _state(view):
            plan = plan_client_sync(view=view, messages=messages, to_transcript=to_transcript)
        match, new = plan.match, plan.new
        if plan.diverged:
            view.divergences += 1
            marker = {"role": "user", "content": MARKER.format(at=match.prefix)}
            marker_seq = _append(session, [marker])
            ClientCompaction.objects.create(
                session=session, marker_seq=marker_seq, at_message=match.prefix
            )
            _close_open_calls(session)
            view.renamed = {}
            if new:
                _append(session, new)
            _restart_window(session, marker_seq + 1)
        else:
            new = _rename(new, dict(view.renamed or {}))
            if new:
                _append(session, new)
        _write_view(view, plan.chains, match.same)
    return Synced(len(new), plan.diverged, view.count, view.chain)


def _sync_as_planned(session: Session, plan: SyncPlan) -> Synced | None:
    """The common sync in one statement on the view: the history grew as planned.

    The view is updated only if it is still the one planned against (the
    conditional UPDATE locks the row and checks its state, as the locking
    read would); then the new messages and entries are written under that
    lock. None (nothing written): a first call, a divergence, or a concurrent
    sync moved the view: the caller locks, reads and plans again.
    """
    if plan.view_pk is None or plan.diverged or plan.renamed is None:
        return None
    count, chain, reply_at, reply_chain, divergences = plan.state
    moved = ClientView.objects.filter(
        pk=plan.view_pk,
        count=count,
        chain=chain,
        reply_at=reply_at,
        reply_chain=reply_chain,
        divergences=divergences,
    ).update(**_view_fields(plan.chains), updated_at=timezone.now())
    if not moved:
        return None
    new = _rename(plan.new, plan.renamed)
    if new:
        _append(session, new)
    _write_entries(plan.view_pk, plan.chains, plan.match.same)
    return Synced(len(new), False, len(plan.chains), plan.chains.last())


def client_view_add_reply(
    *, session: Session, fingerprint: str, synced: Synced | None = None
) -> None:
    """Record the reply the client got, as the next message of its view (one row, no entry).

    With ``synced`` (the call's sync) it is one conditional UPDATE: the view
    must still be the one that sync wrote; otherwise (a concurrent call) the
    row is locked and read.
    """
    if synced is not None and synced.count >= 0:
        done = ClientView.objects.filter(
            session=session, count=synced.count, chain=synced.chain, reply_at=None
        ).update(
            reply_at=synced.count,
            reply_chain=synced.chain,
            chain=chain_next(synced.chain, fingerprint),
            count=synced.count + 1,
            updated_at=timezone.now(),
        )
        if done:
            return
    with transaction.atomic():
        view, _ = ClientView.objects.select_for_update().get_or_create(session=session)
        view.reply_at = view.count
        view.reply_chain = view.chain
        view.chain = chain_next(view.chain, fingerprint)
        view.count += 1
        view.save()
