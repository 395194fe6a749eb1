"""One call's record read as a side-by-side: what the client sent, what was sent
(docs/proxy.md#what-changed; the API's ``GET /sessions/{sid}/calls/{id}`` and the
inspector's call detail).

The record keeps runs of seqs, not rows per message (``call_breakdown``'s
``sent``), and a proxied call's account of the client's request
(``ContextCall.request``). Reading them here costs three queries whatever the
session's length: the call, the previous proxied call's account (what the
client's system prompt and tools were one request earlier) and the messages
sent as views, which are listed one by one (``VIEWS_LISTED`` at most).
"""

from __future__ import annotations

from typing import Any

from .models import ContextCall, Message, Session

VIEWS_LISTED = 300


def call_account(session: Session, call: ContextCall) -> dict[str, Any] | None:
    """The side-by-side of ``call`` (None: a record from before runs were kept)."""
    breakdown = call.breakdown or {}
    sent = breakdown.get("sent")
    if sent is None and call.request is None:
        return None
    out: dict[str, Any] = {"client": None, "changes": None, "since_previous": None}
    if call.request is not None:
        out["client"] = call.request.get("client")
        out["changes"] = call.request.get("changes")
        out["since_previous"] = _since_previous(session, call)
    out["messages"] = _messages(session, sent or {}, breakdown.get("added") or [])
    out["added"] = breakdown.get("added") or []
    out["breakpoints"] = call.breakpoints or []
    return out


def _since_previous(session: Session, call: ContextCall) -> dict[str, Any] | None:
    """What the client changed since its previous request: system prompt, tools, messages."""
    previous = (
        ContextCall.objects.filter(
            session=session, pk__lt=call.pk, source=ContextCall.Source.PROXY, request__isnull=False
        )
        .order_by("-pk")
        .values_list("pk", "request")
        .first()
    )
    if previous is None:
        return None
    pk, before = previous
    now = (call.request or {}).get("client") or {}
    then = (before or {}).get("client") or {}
    names_now = (now.get("tools") or {}).get("names") or []
    names_then = (then.get("tools") or {}).get("names") or []
    return {
        "call": pk,
        "system_changed": (now.get("system") or {}).get("digest")
        != (then.get("system") or {}).get("digest"),
        "tools_changed": (now.get("tools") or {}).get("digest")
        != (then.get("tools") or {}).get("digest"),
        "tools_added": [n for n in names_now if n not in names_then],
        "tools_removed": [n for n in names_then if n not in names_now],
        "messages_before": then.get("messages"),
    }


def _messages(
    session: Session, sent: dict[str, Any], added: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The transcript, seq range by seq range, as this call sent it: ``kept``, ``view``
    (each message listed, with its state), ``summarised`` or ``not sent``."""
    ranges = sent.get("ranges") or []
    views = sent.get("views") or {}
    window = sent.get("window") or {}
    summarised = any(item.get("what") == "summary" for item in added)
    compacted = ((window.get("head_end_seq") or 0) + 1, (window.get("start_seq") or 1) - 1)
    state_of = {
        seq: state
        for state, pairs in views.items()
        for first, last in pairs
        for seq in range(first, last + 1)
    }
    listed = dict(_view_messages(session, sorted(state_of)[:VIEWS_LISTED]))
    rows: list[dict[str, Any]] = []
    cursor = 1
    for first, last in ranges:
        if first > cursor:
            rows.extend(_gap(cursor, first - 1, compacted, summarised))
        rows.extend(_range_rows(first, last, state_of, listed))
        cursor = last + 1
    return rows


def _gap(first: int, last: int, compacted: tuple[int, int], summarised: bool) -> list[dict]:
    """Seqs not sent: those the compaction took (``compacted``) are in the summary when
    one was sent; the others (retracted, markers) are simply not sent."""
    rows = []
    low, high = max(first, compacted[0]), min(last, compacted[1])
    if low > high:
        return [{"from": first, "to": last, "as": "not sent"}]
    if first < low:
        rows.append({"from": first, "to": low - 1, "as": "not sent"})
    rows.append({"from": low, "to": high, "as": "summarised" if summarised else "not sent"})
    if high < last:
        rows.append({"from": high + 1, "to": last, "as": "not sent"})
    return rows


def _range_rows(
    first: int, last: int, state_of: dict[int, str], listed: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    kept_from = first
    for seq in range(first, last + 1):
        state = state_of.get(seq)
        if state is None:
            continue
        if kept_from < seq:
            rows.append({"from": kept_from, "to": seq - 1, "as": "kept", "count": seq - kept_from})
        rows.append({"from": seq, "to": seq, "as": "view", "state": state, **listed.get(seq, {})})
        kept_from = seq + 1
    if kept_from <= last:
        rows.append({"from": kept_from, "to": last, "as": "kept", "count": last - kept_from + 1})
    return rows


def _view_messages(session: Session, seqs: list[int]) -> list[tuple[int, dict[str, Any]]]:
    if not seqs:
        return []
    found = Message.objects.filter(session=session, seq__in=seqs).values_list(
        "seq", "role", "name", "output_ref", "token_count"
    )
    return [
        (seq, {"role": role, "name": name or "", "ref": ref or "", "tokens_now": tokens})
        for seq, role, name, ref, tokens in found
    ]
