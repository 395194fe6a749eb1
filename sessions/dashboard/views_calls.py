"""The inspector's calls card (what was sent, per call; cost; forecast) and cost per day.

Thin: parse, call a selector from ``selectors.calls``, render a partial of
``sessions/calls.html``. Every view reads ``ContextCall`` records, never
today's messages.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sessions.models import Session
from sessions.selectors_call_account import call_account

from .forms import int_param
from .http import HtmxHttpRequest, is_partial, operator_required
from .selectors.calls import (
    call_at_seq,
    call_for_operator,
    cost_by_day,
    forecast,
    recent_calls,
    session_cost,
)
from .selectors.detail import session_for_operator
from .selectors.finder import turn_end_seq


def calls_context(session: Session, *, before: int | None = None) -> dict[str, Any]:
    """The calls card's context (also rendered inline by the inspector page)."""
    calls, more = recent_calls(session, before=before)
    return {
        "session": session,
        "calls": calls,
        "calls_more": more,
        "cost": session_cost(session),
        "forecast": forecast(session),
    }


@require_GET
@operator_required
def session_calls(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The card, or (``before``) the next rows of its table."""
    session = session_for_operator(pk)
    before = int_param(request.GET.get("before"), minimum=1)
    context = calls_context(session, before=before)
    partial = "calls-rows" if before else "calls"
    return render(request, f"sessions/calls.html#{partial}", context)


@require_GET
@operator_required
def session_call(request: HtmxHttpRequest, pk: int, call_id: int) -> HttpResponse:
    """What was sent in one call: figures, sections, tools, largest messages, placeholders."""
    session = session_for_operator(pk)
    call = call_for_operator(session, call_id)
    context = {"session": session, "call": call, "account": call_account(session, call)}
    return render(request, "sessions/calls.html#call-detail", context)


@require_GET
@operator_required
def session_call_at(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """What was sent at seq N (``seq``) or at the end of user turn N (``turn``)."""
    session = session_for_operator(pk)
    seq = int_param(request.GET.get("seq"), minimum=1)
    turn = int_param(request.GET.get("turn"), minimum=1)
    context: dict[str, Any] = {"session": session, "asked_seq": seq, "asked_turn": turn}
    if seq is None and turn is not None:
        seq = turn_end_seq(session, turn)
    if seq is None:
        context["error"] = "Give a seq or a turn number."
        return render(request, "partials/_error.html", context)
    try:
        context["call"] = call = call_at_seq(session, seq)
        context["account"] = call_account(session, call)
    except Http404:
        context["error"] = f"No context build was recorded at or before seq {seq}."
        return render(request, "partials/_error.html", context)
    return render(request, "sessions/calls.html#call-detail", context)


@require_GET
@operator_required
def cost_overview(request: HtmxHttpRequest) -> HttpResponse:
    """Cost per day across every session (the sessions list's cost card)."""
    days = min(int_param(request.GET.get("days"), default=14, minimum=1) or 14, 90)
    context = {"days": cost_by_day(days=days), "span": days}
    if is_partial(request):
        return render(request, "sessions/calls.html#cost-by-day", context)
    return render(request, "sessions/cost.html", context)
