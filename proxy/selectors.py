"""Reads of the proxy's state: how much of a client's history the session already holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextsvc.engine.providers.fingerprint import common_prefix

from .models import ClientView, ClientViewEntry


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


def _chain_at(chains: Sequence[str], n: int) -> str:
    """The chain of the first ``n`` messages ("" for none)."""
    return chains[n - 1] if n else ""


def _entries(view: ClientView, limit: int) -> list[str]:
    """The stored per-message chains below ``limit`` (read only on a divergence)."""
    rows = ClientViewEntry.objects.filter(view=view, index__lt=limit).order_by("index")
    return list(rows.values_list("chain", flat=True))


def match_view(
    view: ClientView | None, chains: Sequence[str], messages: Sequence[dict[str, Any]]
) -> Match:
    """Compare the client's history (its chain hashes) with the view (``services.sync``: the echo rule).

    One comparison on the common paths (the history grew, or echoed the reply
    and grew); the per-message entries are read only when it diverged.
    """
    if view is None or view.count == 0:
        return Match(prefix=0, same=0, stored=0)
    count, at, m = view.count, view.reply_at, len(chains)
    if at is None:
        if m >= count and chains[count - 1] == view.chain:
            return Match(prefix=count, same=count, stored=count)
        limit = min(count, m)
    else:
        if _chain_at(chains, min(at, m)) == view.reply_chain and m >= at:
            if m > at and messages[at].get("role") == "assistant":
                # The reply, echoed (or exactly as stored): the view had no entry for it.
                return Match(prefix=at + 1, same=at, stored=count)
            return Match(prefix=at, same=at, stored=count)
        limit = min(at, m)
    stored = _entries(view, limit)
    n = common_prefix(stored, chains)
    return Match(prefix=n, same=n, stored=count)


def client_view(session_pk: int) -> ClientView | None:
    return ClientView.objects.filter(session_id=session_pk).first()
