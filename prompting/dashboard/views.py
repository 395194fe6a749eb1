"""The inspector's context tab: the built body laid out for reading, and as JSON."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from contextsvc.http import json_response
from sessions.dashboard.forms import int_param
from sessions.dashboard.http import HtmxHttpRequest, operator_required
from sessions.dashboard.selectors.detail import session_for_operator

from .selectors import context_body, context_view

CONTEXT_FORMATS = ("anthropic", "openai")


@require_GET
@operator_required
def session_context(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The tab (or, with ``start``, an earlier page of its messages)."""
    session = session_for_operator(pk)
    fmt = request.GET.get("format", "anthropic")
    if fmt not in CONTEXT_FORMATS:
        fmt = "anthropic"
    start = int_param(request.GET.get("start"))
    view = context_view(session, fmt, start=start)
    context = {"session": session, "ctx": view, "formats": CONTEXT_FORMATS}
    partial = "context-messages" if start is not None else "context"
    return render(request, f"prompting/context.html#{partial}", context)


@require_GET
@operator_required
def session_context_json(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The whole body, as ``GET /api/v1/sessions/{sid}/context`` returns it."""
    session = session_for_operator(pk)
    fmt = request.GET.get("format", "anthropic")
    if fmt not in ("anthropic", "openai", "raw"):
        fmt = "anthropic"
    response = json_response(context_body(session, fmt))
    response["Content-Disposition"] = f'inline; filename="{session.external_id}-{fmt}.json"'
    return response
