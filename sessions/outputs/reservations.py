"""Tool budget before a tool runs (docs/concepts/guard.md#tool-budget): an output's cost, preview,
reserve, release."""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.output_views import (
    OutputInfo,
    count_lines,
    iter_text_lines,
    make_view,
    view_bytes_estimate,
)
from contextsvc.engine.token_estimate import count_message
from contextsvc.errors import ValidationFailed

from .. import accounting, hotpath, status
from ..models import Session
from .budget import cache_config, tool_budget_sticky
from .store import content_ref


def tool_output_cost(
    session: Session,
    *,
    bytes: int | None = None,
    tokens: int | None = None,
    text: str | None = None,
    tool_call_id: str | None = None,
) -> dict[str, int]:
    """Tokens a tool output will take in context: its view, not the blob.

    ``text`` is priced as the posted result will be charged (docs/concepts/guard.md#tool-budget:
    a preview is what the result costs): the same view, with the ref it
    will carry (``store.content_ref``, or the session's stored copy of those
    bytes), counted as the append counts the message — so give the
    ``tool_call_id`` the result will answer. ``bytes`` and ``tokens`` go
    through the same cut as an estimate (bytes/4, DESIGN.md), so a 200 MB
    output reserves what its 50 KiB view costs.
    """
    config = cache_config(session)
    estimate = accounting.estimate_config_of(session)
    overhead = estimate.per_message_overhead
    tokenizer = accounting.tokenizer_of(session)
    if text is not None:
        data = text.encode("utf-8", errors="surrogatepass")
        view_text = None
        if config.enabled:
            sha256 = hashlib.sha256(data).hexdigest()
            stored = session.outputs.filter(sha256=sha256).values_list("ref", flat=True).first()
            info = OutputInfo(
                ref=stored or content_ref(session, sha256),
                byte_size=len(data),
                line_count=count_lines(text),
                # The view names the tool the call was to, as the append's does.
                tool_name=(session.open_tool_calls or {}).get(tool_call_id or "", ""),
            )
            view = make_view(iter_text_lines(text, config.max_line_length + 1), info, config)
            view_text = None if view.is_full else view.text or ""
        message = EngineMessage(
            role="tool", content=text, view=view_text, tool_call_id=tool_call_id
        )
        # Counted as an append of this one result would count it: exactly up to
        # the per-request budget, past it with the bounded estimate.
        counted = count_message(
            message, tokenizer, estimate, exact_chars=settings.CONTEXTSVC_EXACT_TOKEN_CHARS
        )
        return {
            "tokens": counted.tokens,
            "raw_tokens": -(-len(data) // 4),
            "bytes": len(data),
        }
    if bytes is not None:
        view_bytes = view_bytes_estimate(bytes, config)
        return {
            "tokens": -(-view_bytes // 4) + overhead,
            "raw_tokens": -(-bytes // 4),
            "bytes": bytes,
        }
    if tokens is not None:
        cap = -(-view_bytes_estimate(tokens * 4, config) // 4)
        return {"tokens": min(tokens, cap) + overhead, "raw_tokens": tokens, "bytes": tokens * 4}
    raise ValidationFailed("Give one of bytes, tokens or text", details={"field": "bytes"})


def _can_execute(session: Session) -> bool:
    """Whether a tool may still be priced in at all, before its own fit is checked.

    docs/concepts/guard.md#sticky-refusal (``policy.tool_budget_sticky``): not once
    toolBudgetExceeded is set or the session is final. By default each output
    is judged on its own size: one refusal does not refuse a smaller one.
    """
    if tool_budget_sticky(session):
        return not session.tool_budget_exceeded and session.status != Session.Status.FINAL
    return True


def tool_output_preview(session: Session, **cost: Any) -> dict[str, Any]:
    """docs/concepts/guard.md#tool-budget: the cost and whether it fits, reserving nothing."""
    tool_call_id = cost.pop("tool_call_id", None)
    price = tool_output_cost(session, tool_call_id=tool_call_id, **cost)
    replaced = int((session.tool_reservations or {}).get(tool_call_id or "", 0))
    state = accounting.compute_budget(session, extra=max(0, price["tokens"] - replaced))
    fits = state.guard.status != "final"
    return {
        **price,
        "fits": fits,
        "can_execute": _can_execute(session) and fits,
        "projected": state.guard.projected,
        "limit": state.guard.limit,
        "reserved_tokens": session.reserved_tokens,
        "tool_budget_exceeded": session.tool_budget_exceeded,
    }


@transaction.atomic
def session_reserve_tool_output(
    *, session: Session, tool_call_id: str | None = None, **cost: Any
) -> dict[str, Any]:
    """docs/concepts/guard.md#tool-budget: hold the output's tokens as the guard's pending.

    A reservation that does not fit is refused and sets toolBudgetExceeded:
    the session turns final and canExecuteTool answers false from then on.
    """
    session = hotpath.lock_session(session.pk)
    price = tool_output_cost(session, tool_call_id=tool_call_id, **cost)
    reservations = dict(session.tool_reservations or {})
    key = tool_call_id
    if key is None:
        numbers = [int(k[1:]) for k in reservations if k.startswith("~")]
        key = f"~{max(numbers, default=0) + 1}"
    ok = _can_execute(session)
    reason = None if ok else "toolBudgetExceeded" if session.tool_budget_exceeded else "final"
    if ok:
        previous = reservations.pop(key, 0)
        session.reserved_tokens = sum(reservations.values())
        state = accounting.compute_budget(session, extra=price["tokens"])
        if state.guard.status == "final":
            ok, reason = False, "toolBudgetExceeded"
            if previous:
                reservations[key] = previous
            session.tool_budget_exceeded = True
            status.session_mark_final(session=session, reason="toolBudgetExceeded")
        else:
            reservations[key] = price["tokens"]
    state = _save_reservations(session, reservations, "tool_budget_exceeded")
    return {
        "ok": ok,
        "reason": reason,
        "tool_call_id": tool_call_id,
        "reservation": key if ok else None,
        **price,
        "reserved_tokens": session.reserved_tokens,
        "can_execute": _can_execute(session),
        "tool_budget_exceeded": session.tool_budget_exceeded,
        "budget": state.to_dict(),
    }


def _save_reservations(
    session: Session, reservations: dict[str, int], *fields: str
) -> accounting.BudgetState:
    """Store the reservations and the guard figures they change (the session is locked)."""
    session.tool_reservations = reservations
    session.reserved_tokens = sum(reservations.values())
    state = status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save(
        update_fields=[
            "tool_reservations",
            "reserved_tokens",
            *fields,
            "guard_status",
            "used_tokens",
            "updated_at",
        ]
    )
    return state


@transaction.atomic
def session_release_tool_reservation(
    *, session: Session, tool_call_id: str | None = None
) -> dict[str, Any]:
    """Drop one reservation (by tool_call_id or reservation key), or all of them."""
    session = hotpath.lock_session(session.pk)
    reservations = dict(session.tool_reservations or {})
    released = 0
    if tool_call_id is None:
        released = sum(reservations.values())
        reservations = {}
    elif tool_call_id in reservations:
        released = reservations.pop(tool_call_id)
    state = _save_reservations(session, reservations)
    return {
        "released_tokens": released,
        "reserved_tokens": session.reserved_tokens,
        "can_execute": _can_execute(session),
        "budget": state.to_dict(),
    }
