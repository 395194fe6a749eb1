"""Reads of the proxy's state: how much of a client's history the session already holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextsvc.engine.providers.fingerprint import ClientChains, common_prefix
from sessions.extensions import CLIENT_COMPACTION, WindowEvent
from sessions.models import Session

from . import chain_memo
from .json_prefix import json_digests, kept_digests
from .models import ClientCompaction, ClientView, ClientViewEntry

# The role of a reply in a client's history: ``model`` is Gemini's name for it.
_REPLY_ROLES = frozenset(("assistant", "model"))


@dataclass(frozen=True, slots=True)
class Match:
    """How a client's history compares with its stored view.

    ``prefix`` leading messages are held by the session (the echoed reply
    counts); the first ``same`` of them have the stored chains, so the view's
    entries need writing from there on; ``stored`` is the view's length.
    """

    prefix: int
    same: int
    stored: int


def client_chains(view: ClientView | None, messages: Sequence[dict[str, Any]]) -> ClientChains:
    """The chains of ``messages``, fingerprinting only what follows the client's last request.

    When the first ``view.raw_count`` messages are, as JSON, those of the
    client's last request, their chain is the one stored then; otherwise (a
    first call, an edited history, another serialiser) every message is
    fingerprinted. First, though: when they begin with the previous call's own
    message objects (``chain_memo``; a moved cache marker changed the message
    after those), the chain is the one kept from that call, and the digest is
    taken only if it costs nothing but the new messages (``kept_digests``).
    ``digest`` is what the view stores for the next call ("" when none).
    """
    known = view.raw_count if view is not None else 0
    shared = chain_memo.known_chain(messages)
    if shared is not None:
        # The previous call's own message objects lead (a moved cache marker changed
        # the one after them, or nothing changed): no digest of the whole is needed.
        chains = ClientChains(messages, *shared)
        digests = kept_digests(messages, known)
    else:
        digests = json_digests(messages, known)
        prefix = digests[0] if digests is not None else ""
        if known and view is not None and view.raw_digest and prefix == view.raw_digest:
            chains = ClientChains(messages, known, view.raw_chain)
        else:
            chains = ClientChains(messages)
    chains.digest = digests[1] if digests is not None else ""
    chain_memo.keep(messages, chains)  # a process cache: no database write
    return chains


def _entries(view: ClientView, limit: int) -> list[str]:
    """The stored per-message chains below ``limit`` (read only on a divergence)."""
    rows = ClientViewEntry.objects.filter(view=view, index__lt=limit).order_by("index")
    return list(rows.values_list("chain", flat=True))


def match_view(
    view: ClientView | None, chains: ClientChains, messages: Sequence[dict[str, Any]]
) -> Match:
    """Compare the client's history (its chain hashes) with the view (``services.sync``: the echo rule).

    One comparison on the common paths (the history grew, or echoed the reply
    and grew); the per-message entries are read only when it diverged.
    """
    if view is None or view.count == 0:
        return Match(prefix=0, same=0, stored=0)
    count, at, m = view.count, view.reply_at, len(chains)
    if at is None:
        if m >= count and chains.at(count) == view.chain:
            return Match(prefix=count, same=count, stored=count)
        limit = min(count, m)
    else:
        if chains.at(min(at, m)) == view.reply_chain and m >= at:
            if m > at and messages[at].get("role") in _REPLY_ROLES:
                # The reply, echoed (or exactly as stored): the view had no entry for it.
                return Match(prefix=at + 1, same=at, stored=count)
            return Match(prefix=at, same=at, stored=count)
        limit = min(at, m)
    stored = _entries(view, limit)
    n = common_prefix(stored, chains.full())
    return Match(prefix=n, same=n, stored=count)


def client_view(session_pk: int) -> ClientView | None:
    return ClientView.objects.filter(session_id=session_pk).first()


def window_events(session: Session) -> list[WindowEvent]:
    """Each divergence as a window event (the live window restarted after its marker): 1 query."""
    rows = (
        ClientCompaction.objects.filter(session=session)
        .order_by("marker_seq")
        .values_list("marker_seq", flat=True)
    )
    return [WindowEvent(seq, seq + 1, None, CLIENT_COMPACTION) for seq in rows]
