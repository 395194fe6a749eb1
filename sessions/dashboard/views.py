"""Dashboard pages and their htmx partials.

One template per page; an htmx request renders the named partial alone
(``"sessions/detail.html#budget"``). Views parse, call a selector or a
service, and render: no queries or rules here.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from contextsvc.errors import ServiceError
from contextsvc.http import json_response
from sessions import selectors_dashboard as sel
from sessions.services.keys import agent_key_create, agent_key_revoke

from . import charts
from .forms import AgentKeyForm, SessionFilterForm, int_param


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _is_partial(request: HtmxHttpRequest) -> bool:
    # A history restore after the cache was evicted asks for the whole page.
    return bool(request.htmx) and not request.htmx.history_restore_request


def operator_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Logged-in staff only. An htmx request whose login expired is sent to
    the login page as a whole-page redirect, not a login form swapped into a card."""

    @wraps(view)
    def wrapper(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            if request.htmx:
                path = request.htmx.current_url_abs_path or request.get_full_path()
                return HttpResponseClientRedirect(redirect_to_login(path).url)
            return redirect_to_login(request.get_full_path())
        if not request.user.is_staff:
            raise PermissionDenied("The dashboard is for operators (staff users).")
        return view(request, *args, **kwargs)

    return wrapper


# --- sessions list ------------------------------------------------------------------


@require_GET
@operator_required
def session_list(request: HtmxHttpRequest) -> HttpResponse:
    form = SessionFilterForm(request.GET)
    filters = form.filters()
    page = sel.session_page(filters)
    rows = [
        {
            "session": s,
            "status": sel.display_status(s),
            "usage_pct": sel.usage_pct(s),
            "usable": sel.usable_tokens(s),
        }
        for s in page.object_list
    ]
    context = {"form": form, "filters": filters, "page": page, "rows": rows}
    if _is_partial(request):
        return render(request, "sessions/list.html#results", context)
    context["agents"] = sel.session_agents()
    context["key_filter"] = sel.agent_key_or_none(filters.key)
    return render(request, "sessions/list.html", context)


# --- session inspector -----------------------------------------------------------------


def _usage_context(session) -> dict[str, Any]:
    series = sel.usage_over_turns(session)
    return {"usage": series, "chart": charts.usage_chart(series)}


@require_GET
@operator_required
def session_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = sel.session_for_operator(pk)
    context = {
        "session": session,
        "status": sel.display_status(session),
        "budget": sel.budget_view(session),
        "timeline": sel.timeline_page(session),
        **_usage_context(session),
        **_compact_context(session, run=sel.active_run(session)),
    }
    return render(request, "sessions/detail.html", context)


@require_GET
@operator_required
def session_budget(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The budget card; polled, and refreshed when a compaction finishes.

    Also carries the header's status and counters out of band, so one poll
    keeps the whole top of the page current."""
    session = sel.session_for_operator(pk)
    context = {
        "session": session,
        "status": sel.display_status(session),
        "budget": sel.budget_view(session),
        "oob": True,
        "seen_seq": int_param(request.GET.get("seen"), default=session.last_seq),
    }
    return render(request, "sessions/detail.html#budget", context)


@require_GET
@operator_required
def session_usage(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = sel.session_for_operator(pk)
    return render(
        request, "sessions/detail.html#usage", {"session": session, **_usage_context(session)}
    )


@require_GET
@operator_required
def session_timeline(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A page of turns: the newest without ``before``, older ones as the operator scrolls."""
    session = sel.session_for_operator(pk)
    before = int_param(request.GET.get("before"), minimum=1)
    timeline = sel.timeline_page(session, before=before)
    partial = "timeline-page" if before else "timeline"
    return render(
        request, f"sessions/detail.html#{partial}", {"session": session, "timeline": timeline}
    )


@require_GET
@operator_required
def message_full(request: HtmxHttpRequest, pk: int, seq: int) -> HttpResponse:
    """A message's whole stored text (content, and the view the model sees when it differs)."""
    session = sel.session_for_operator(pk)
    message = sel.message_for_operator(session, seq)
    return render(
        request, "sessions/detail.html#message-full", {"session": session, "message": message}
    )


CONTEXT_FORMATS = ("anthropic", "openai")


@require_GET
@operator_required
def session_context(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = sel.session_for_operator(pk)
    fmt = request.GET.get("format", "anthropic")
    if fmt not in CONTEXT_FORMATS:
        fmt = "anthropic"
    start = int_param(request.GET.get("start"))
    view = sel.context_view(session, fmt, start=start)
    context = {"session": session, "ctx": view, "formats": CONTEXT_FORMATS}
    partial = "context-messages" if start is not None else "context"
    return render(request, f"sessions/detail.html#{partial}", context)


@require_GET
@operator_required
def session_context_json(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The whole body, as ``GET /api/v1/sessions/{sid}/context`` returns it."""
    session = sel.session_for_operator(pk)
    fmt = request.GET.get("format", "anthropic")
    if fmt not in ("anthropic", "openai", "raw"):
        fmt = "anthropic"
    response = json_response(sel.context_body(session, fmt))
    response["Content-Disposition"] = f'inline; filename="{session.external_id}-{fmt}.json"'
    return response


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
    context = {"keys": sel.agent_keys(), "form": form, "created": created, "raw_key": raw_key}
    if _is_partial(request):
        response = render(request, "sessions/keys.html#keys-panel", context)
    else:
        response = render(request, "sessions/keys.html", context)
    if raw_key:
        response["Cache-Control"] = "no-store"
    return response


@require_POST
@operator_required
def key_revoke(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    key = sel.agent_key_for_operator(pk)
    agent_key_revoke(key=key)
    context = {"keys": sel.agent_keys(), "form": AgentKeyForm(), "revoked": key}
    if _is_partial(request):
        return render(request, "sessions/keys.html#keys-panel", context)
    return render(request, "sessions/keys.html", context)


# --- stored tool outputs ------------------------------------------------------------


def _output_context(request: HtmxHttpRequest, pk: int, ref: str) -> dict[str, Any]:
    session = sel.session_for_operator(pk)
    output = sel.output_for_operator(session, ref)
    # ``m``: the message whose card hosts the viewer (one output may back several messages).
    return {"session": session, "output": output, "m": int_param(request.GET.get("m"), default=0)}


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
    limit = int_param(request.GET.get("limit"), default=sel.OUTPUT_PAGE_LINES, minimum=1)
    limit = min(limit, 1000)
    if line:
        offset = max(1, line - 5)
    part = request.GET.get("part", "")
    try:
        lines = sel.output_lines(context["output"], offset=offset, limit=limit, target=line)
    except ServiceError as exc:
        context["error"] = exc.message
        return render(request, "sessions/detail.html#output-error", context)
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
        return render(request, "sessions/detail.html#output-error", context)
    try:
        context["grep"] = sel.output_grep_view(
            context["output"], pattern=pattern, context=grep_context, ignore_case=ignore_case
        )
    except ServiceError as exc:
        context["error"] = exc.message
        return render(request, "sessions/detail.html#output-error", context)
    return render(request, "sessions/detail.html#output-grep", context)


@require_GET
@operator_required
def output_raw(request: HtmxHttpRequest, pk: int, ref: str) -> HttpResponse:
    """The stored bytes exactly as posted, streamed (as ``GET /refs/{ref}/raw``)."""
    from django.http import StreamingHttpResponse

    from sessions.output_store import output_iter_bytes

    context = _output_context(request, pk, ref)
    output = context["output"]
    response = StreamingHttpResponse(
        output_iter_bytes(output), content_type="text/plain; charset=utf-8"
    )
    response["Content-Length"] = str(output.byte_size)
    response["Content-Disposition"] = f'attachment; filename="{output.ref}.txt"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


# --- compaction (issue 4) ----------------------------------------------------------------
#
# Writes go through compaction.services (the same calls POST /compact and the
# restore endpoint make); the run itself executes in a Celery worker and the
# page follows it by polling, which stops with 286 once the run has finished.

# htmx events sent with HX-Trigger: the window changed (budget, chart and
# timeline reload), a compaction finished (the history reloads too).
WINDOW_CHANGED = "window-changed"
COMPACTION_FINISHED = "compaction-finished"


def _compact_context(session, form=None, run=None, joined=False) -> dict[str, Any]:
    from .forms import CompactForm

    policy = (session.policy or {}).get("compaction") or {}
    return {
        "session": session,
        "compact_form": form
        or CompactForm(
            initial={"strategy": "chain", "retain_last_turns": policy.get("retain_last_turns", 1)}
        ),
        "run": run,
        "joined": joined,
    }


@require_POST
@operator_required
def compact_start(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Queue a manual compaction (or join the one under way) and follow it."""
    from compaction import services as compaction_services
    from contextsvc.engine.errors import EngineValidationError

    from .forms import CompactForm

    session = sel.session_for_operator(pk)
    form = CompactForm(request.POST)
    run = None
    joined = False
    if form.is_valid():
        try:
            run, created = compaction_services.compaction_request(
                session=session,
                trigger="manual",
                strategy=form.cleaned_data["strategy"],
                instructions=form.cleaned_data["instructions"] or "",
                retain_last_turns=form.cleaned_data["retain_last_turns"],
            )
            joined = not created
        except ServiceError as exc:
            form.add_error(None, exc.message)
        except EngineValidationError as exc:
            form.add_error(None, exc.message)
    context = _compact_context(session, form, run, joined)
    return render(request, "sessions/detail.html#compact-panel", context)


@require_GET
@operator_required
def compact_preview(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """What the form's compaction would do, computed without changing anything."""
    from contextsvc.engine.errors import EngineValidationError

    from .forms import CompactForm

    session = sel.session_for_operator(pk)
    form = CompactForm(request.GET)
    context: dict[str, Any] = {"session": session}
    if not form.is_valid():
        context["error"] = "; ".join(e for errors in form.errors.values() for e in errors)
        return render(request, "sessions/detail.html#output-error", context)
    try:
        context["preview"] = sel.compaction_preview(
            session,
            strategy=form.cleaned_data["strategy"],
            instructions=form.cleaned_data["instructions"] or "",
            retain_last_turns=form.cleaned_data["retain_last_turns"],
        )
    except (ServiceError, EngineValidationError) as exc:
        context["error"] = exc.message
        return render(request, "sessions/detail.html#output-error", context)
    return render(request, "sessions/detail.html#compact-preview", context)


@require_GET
@operator_required
def compaction_status(request: HtmxHttpRequest, pk: int, run_id: str) -> HttpResponse:
    """One poll of a run: queued → running → succeeded / failed.

    A finished run answers 286 (htmx stops polling) and tells the page, with
    HX-Trigger, to reload what the compaction changed."""
    from django_htmx.http import HTMX_STOP_POLLING, trigger_client_event

    session = sel.session_for_operator(pk)
    run = sel.run_for_operator(session, run_id)
    response = render(request, "sessions/detail.html#run-status", {"session": session, "run": run})
    if run.is_finished:
        response.status_code = HTMX_STOP_POLLING
        if run.changed:
            trigger_client_event(response, WINDOW_CHANGED)
        trigger_client_event(response, COMPACTION_FINISHED)
    return response


@require_GET
@operator_required
def compaction_history(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = sel.session_for_operator(pk)
    return render(request, "sessions/detail.html#compactions", _history_context(session))


def _history_context(session, **extra: Any) -> dict[str, Any]:
    runs = sel.compaction_runs(session)
    restores = sel.restore_snapshots(session)
    return {
        "session": session,
        "runs": runs,
        "restores": restores,
        "live_snapshot_id": sel.live_snapshot_id(session),
        **extra,
    }


@require_GET
@operator_required
def snapshot_detail(request: HtmxHttpRequest, pk: int, snapshot_id: int) -> HttpResponse:
    session = sel.session_for_operator(pk)
    snapshot = sel.snapshot_for_operator(session, snapshot_id)
    diff = sel.snapshot_diff(session, snapshot)
    return render(request, "sessions/detail.html#snapshot", {"session": session, "diff": diff})


@require_POST
@operator_required
def snapshot_restore(
    request: HtmxHttpRequest, pk: int, snapshot_id: int | None = None
) -> HttpResponse:
    """Make an earlier snapshot (or, without an id, the uncompacted transcript) live again."""
    from django_htmx.http import trigger_client_event

    from compaction import services as compaction_services

    session = sel.session_for_operator(pk)
    if snapshot_id is not None:
        sel.snapshot_for_operator(session, snapshot_id)  # 404 before any write
    try:
        restored = compaction_services.snapshot_restore(session=session, snapshot_id=snapshot_id)
    except ServiceError as exc:
        context = _history_context(session, restore_error=exc.message)
        return render(request, "sessions/detail.html#compactions", context)
    session = sel.session_for_operator(pk)
    context = _history_context(session, restored=restored)
    response = render(request, "sessions/detail.html#compactions", context)
    trigger_client_event(response, WINDOW_CHANGED)
    return response
