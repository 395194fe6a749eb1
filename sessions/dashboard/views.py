"""The session pages of the dashboard (list, inspector, outputs, keys) and their htmx partials.

One template per page; an htmx request renders the named partial alone
(``"sessions/detail.html#budget"``). Views parse, call a selector or a
service, and render: no queries or rules here.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from contextsvc.errors import ServiceError
from sessions.extensions import REGISTRY
from sessions.models import Session
from sessions.outputs.read import output_iter_bytes
from sessions.services.delete import session_delete
from sessions.services.keys import agent_key_create, agent_key_revoke
from sessions.status import usable_tokens
from sessions.transcript_export import export_response

from . import charts
from .forms import AgentKeyForm, SessionFilterForm, int_param
from .http import HtmxHttpRequest, is_partial, operator_required
from .selectors.calls import list_costs, meter_level
from .selectors.detail import (
    budget_view,
    display_status,
    message_for_operator,
    session_for_operator,
)
from .selectors.keys import agent_key_for_operator, agent_key_or_none, agent_keys
from .selectors.listing import (
    session_agents,
    session_clients,
    session_page,
    usage_pct,
)
from .selectors.outputs import (
    OUTPUT_PAGE_LINES,
    output_for_operator,
    output_grep_view,
    output_lines,
    placeholder_info,
)
from .selectors.timeline import timeline_page
from .selectors.usage import usage_over_turns
from .views_calls import calls_context

# --- sessions list ------------------------------------------------------------------


@require_GET
@operator_required
def session_list(request: HtmxHttpRequest) -> HttpResponse:
    form = SessionFilterForm(request.GET)
    filters = form.filters()
    page = session_page(filters)
    costs = list_costs([s.pk for s in page.object_list])
    rows = [
        {
            "session": s,
            "status": display_status(s),
            "usage_pct": usage_pct(s),
            "level": meter_level(s, display_status(s), usage_pct(s)),
            "usable": usable_tokens(s),
            "cost": costs.get(s.pk),
        }
        for s in page.object_list
    ]
    context = {"form": form, "filters": filters, "page": page, "rows": rows}
    if is_partial(request):
        return render(request, "sessions/list.html#results", context)
    context["agents"] = session_agents()
    context["clients"] = session_clients()
    context["key_filter"] = agent_key_or_none(filters.key)
    return render(request, "sessions/list.html", context)


# --- session inspector -----------------------------------------------------------------


def _usage_context(session: Session) -> dict[str, Any]:
    series = usage_over_turns(session)
    # The URL of call 0 with its id made a placeholder: one reverse() per chart.
    call_url = reverse("dashboard:session_call", args=[session.pk, 0])[: -len("0/")] + "{}/"
    return {"usage": series, "chart": charts.usage_chart(series, call_url=call_url)}


def _panels(request: HtmxHttpRequest, session: Session) -> list[SafeString]:
    """The side panels the apps above sessions add to the inspector (compaction:
    the Compact form), rendered here so this page needs no knowledge of them."""
    return [
        render_to_string(template, {"session": session, **context}, request)
        for template, context in (panel(session) for panel in REGISTRY.inspector_panels)
    ]


@require_GET
@operator_required
def session_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = session_for_operator(pk)
    budget = budget_view(session)
    context = {
        "session": session,
        "status": budget.status,
        "budget": budget,
        "level": meter_level(session, budget.status, budget.used_pct),
        "timeline": timeline_page(session),
        **_usage_context(session),
        **calls_context(session),
        "panels": _panels(request, session),
    }
    return render(request, "sessions/detail.html", context)


@require_GET
@operator_required
def session_budget(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The budget card; polled, and refreshed when a compaction finishes.

    Also carries the header's status and counters out of band, so one poll
    keeps the whole top of the page current."""
    session = session_for_operator(pk)
    budget = budget_view(session)
    context = {
        "session": session,
        "status": budget.status,
        "budget": budget,
        "level": meter_level(session, budget.status, budget.used_pct),
        "oob": True,
        "seen_seq": int_param(request.GET.get("seen"), default=session.last_seq),
    }
    return render(request, "sessions/detail.html#budget", context)


@require_GET
@operator_required
def session_usage(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = session_for_operator(pk)
    return render(
        request, "sessions/detail.html#usage", {"session": session, **_usage_context(session)}
    )


@require_GET
@operator_required
def session_timeline(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A page of turns: the newest without ``before``, older ones as the operator scrolls."""
    session = session_for_operator(pk)
    before = int_param(request.GET.get("before"), minimum=1)
    timeline = timeline_page(session, before=before)
    partial = "timeline-page" if before else "timeline"
    return render(
        request, f"sessions/detail.html#{partial}", {"session": session, "timeline": timeline}
    )


@require_GET
@operator_required
def message_full(request: HtmxHttpRequest, pk: int, seq: int) -> HttpResponse:
    """A message's whole stored text (content, and the view the model sees when it differs)."""
    session = session_for_operator(pk)
    message = message_for_operator(session, seq)
    return render(
        request, "sessions/detail.html#message-full", {"session": session, "message": message}
    )


@require_GET
@operator_required
def session_transcript(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The whole transcript as JSONL, streamed: what ``GET /sessions/{sid}/export`` answers."""
    return export_response(session_for_operator(pk))


# --- agent keys -----------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@operator_required
def key_list(request: HtmxHttpRequest) -> HttpResponse:
    """Keys, and a form that creates one. The raw key is rendered once, in the
    response to the POST that created it, and never stored or shown again."""
    created = raw_key = None
    form = AgentKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            created, raw_key = agent_key_create(name=form.cleaned_data["name"])
        except ServiceError as exc:
            form.add_error("name", exc.message)
        else:
            form = AgentKeyForm()
    context = {"keys": agent_keys(), "form": form, "created": created, "raw_key": raw_key}
    if is_partial(request):
        response = render(request, "sessions/keys.html#keys-panel", context)
    else:
        response = render(request, "sessions/keys.html", context)
    if raw_key:
        response["Cache-Control"] = "no-store"
    return response


@require_POST
@operator_required
def key_revoke(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    key = agent_key_for_operator(pk)
    agent_key_revoke(key=key)
    context = {"keys": agent_keys(), "form": AgentKeyForm(), "revoked": key}
    if is_partial(request):
        return render(request, "sessions/keys.html#keys-panel", context)
    return render(request, "sessions/keys.html", context)


# --- deleting a session ---------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@operator_required
def session_delete_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: the confirmation (what will go); POST: delete, then back to the sessions list."""
    session = session_for_operator(pk)
    if request.method == "GET":
        context = {"session": session, "confirm": True}
        if is_partial(request):
            return render(request, "sessions/detail.html#delete-panel", context)
        return render(request, "sessions/delete.html", context)
    session_delete(session=session)
    target = reverse("dashboard:session_list")
    if request.htmx:
        return HttpResponseClientRedirect(target)
    return redirect(target)


# --- stored tool outputs ------------------------------------------------------------


def _output_context(request: HtmxHttpRequest, pk: int, ref: str) -> dict[str, Any]:
    session = session_for_operator(pk)
    output = output_for_operator(session, ref)
    # ``m``: the message whose card hosts the viewer (one output may back several messages).
    m = int_param(request.GET.get("m"), default=0) or 0
    return {
        "session": session,
        "output": output,
        "m": m,
        "placeholder": placeholder_info(session, output, m),
    }


@require_GET
@operator_required
def output_view(request: HtmxHttpRequest, pk: int, ref: str) -> HttpResponse:
    """A stored output's lines: the viewer, or (``part``) a range of it.

    ``line`` jumps to a line (shown a few lines below the top, highlighted);
    ``part=lines`` renders the viewer's body alone, ``part=up`` / ``part=down``
    one more range before or after what is shown ("load more")."""
    context = _output_context(request, pk, ref)
    line = int_param(request.GET.get("line"), minimum=1)
    offset = int_param(request.GET.get("offset"), default=1, minimum=1)
    limit = int_param(request.GET.get("limit"), default=OUTPUT_PAGE_LINES, minimum=1)
    limit = min(limit, 1000)
    if line:
        offset = max(1, line - 5)
    part = request.GET.get("part", "")
    try:
        lines = output_lines(context["output"], offset=offset, limit=limit, target=line)
    except ServiceError as exc:
        context["error"] = exc.message
        return render(request, "partials/_error.html", context)
    context.update(
        lines=lines, show_prev=part in ("", "lines", "up"), show_next=part in ("", "lines", "down")
    )
    if part in ("lines", "up", "down"):
        return render(request, "sessions/detail.html#output-lines", context)
    return render(request, "sessions/detail.html#output-viewer", context)


@require_GET
@operator_required
def output_grep(request: HtmxHttpRequest, pk: int, ref: str) -> HttpResponse:
    """grep through the store's own search; a bad pattern is shown, not raised."""
    context = _output_context(request, pk, ref)
    pattern = request.GET.get("pattern", "")
    grep_context = min(int_param(request.GET.get("context"), default=2) or 0, 20)
    ignore_case = request.GET.get("i") in ("1", "on", "true")
    context.update(pattern=pattern, grep_context=grep_context, ignore_case=ignore_case)
    if not pattern:
        context["error"] = "Type a pattern to search for."
        return render(request, "partials/_error.html", context)
    try:
        context["grep"] = output_grep_view(
            context["output"], pattern=pattern, context=grep_context, ignore_case=ignore_case
        )
    except ServiceError as exc:
        context["error"] = exc.message
        return render(request, "partials/_error.html", context)
    return render(request, "sessions/detail.html#output-grep", context)


@require_GET
@operator_required
def output_raw(request: HtmxHttpRequest, pk: int, ref: str) -> HttpResponse:
    """The stored bytes exactly as posted, streamed (as ``GET /refs/{ref}/raw``)."""
    context = _output_context(request, pk, ref)
    output = context["output"]
    response = StreamingHttpResponse(
        output_iter_bytes(output), content_type="text/plain; charset=utf-8"
    )
    response["Content-Length"] = str(output.byte_size)
    response["Content-Disposition"] = f'attachment; filename="{output.ref}.txt"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
