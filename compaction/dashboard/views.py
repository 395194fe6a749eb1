"""The inspector's compaction views: Compact panel, preview, run polling, history, snapshots, restore.

Writes go through the compaction services (the same calls ``POST /compact``
and the restore endpoint make); the run itself executes in a Celery worker
and the page follows it by polling, which stops with 286 once the run has
finished.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HTMX_STOP_POLLING, trigger_client_event

from compaction import reasons
from compaction.models import CompactionRun
from compaction.services.policy import effective_knobs
from compaction.services.requests import compaction_request
from compaction.services.snapshots import snapshot_restore as snapshot_restore_service
from contextsvc.engine.errors import EngineValidationError
from contextsvc.errors import ServiceError
from sessions.dashboard.http import HtmxHttpRequest, operator_required
from sessions.dashboard.selectors.detail import session_for_operator
from sessions.models import Session

from .forms import CompactForm
from .predictions import preview_prediction
from .selectors import (
    active_run,
    compaction_preview,
    compaction_runs,
    live_snapshot_id,
    restore_snapshots,
    run_for_operator,
    snapshot_diff,
    snapshot_for_operator,
)

PANELS = "compaction/panels.html"

# htmx events sent with HX-Trigger: the window changed (budget, chart and
# timeline reload), a compaction finished (the history reloads too).
WINDOW_CHANGED = "window-changed"
COMPACTION_FINISHED = "compaction-finished"


def _compact_context(
    session: Session,
    form: CompactForm | None = None,
    run: CompactionRun | None = None,
    joined: bool = False,
) -> dict[str, Any]:
    policy = (session.policy or {}).get("compaction") or {}
    return {
        "session": session,
        "compact_form": form
        or CompactForm(
            initial={"strategy": "chain", "retain_last_turns": policy.get("retain_last_turns", 1)}
        ),
        "run": run,
        "joined": joined,
        "knobs": effective_knobs(session),
    }


def compact_panel(session: Session) -> tuple[str, dict[str, Any]]:
    """The Compact panel on the session inspector, following the run under way
    if there is one (registered in ``REGISTRY.inspector_panels``): 1 query."""
    return f"{PANELS}#compact-panel", _compact_context(session, run=active_run(session))


def _prediction(session: Session, form: CompactForm) -> dict[str, Any] | None:
    """The preview of this request, kept with the run (predicted vs actual).

    A dry run that fails does not stop the run itself: the run reports its own error.
    """
    try:
        preview = compaction_preview(
            session,
            strategy=form.cleaned_data["strategy"],
            instructions=form.cleaned_data["instructions"] or "",
            retain_last_turns=form.cleaned_data["retain_last_turns"],
        )
    except (ServiceError, EngineValidationError):
        return None
    return preview_prediction(preview)


@require_POST
@operator_required
def compact_start(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Queue a manual compaction (or join the one under way) and follow it."""
    session = session_for_operator(pk)
    form = CompactForm(request.POST)
    run = None
    joined = False
    if form.is_valid():
        try:
            run, created = compaction_request(
                session=session,
                trigger="manual",
                reason=reasons.manual_dashboard(session, request.user.get_username()),
                strategy=form.cleaned_data["strategy"],
                instructions=form.cleaned_data["instructions"] or "",
                retain_last_turns=form.cleaned_data["retain_last_turns"],
                prediction=_prediction(session, form),
            )
            joined = not created
        except ServiceError as exc:
            form.add_error(None, exc.message)
        except EngineValidationError as exc:
            form.add_error(None, exc.message)
    context = _compact_context(session, form, run, joined)
    return render(request, f"{PANELS}#compact-panel", context)


@require_GET
@operator_required
def compact_preview(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """What the form's compaction would do, computed without changing anything."""
    session = session_for_operator(pk)
    form = CompactForm(request.GET)
    context: dict[str, Any] = {"session": session}
    if not form.is_valid():
        context["error"] = "; ".join(e for errors in form.errors.values() for e in errors)
        return render(request, "partials/_error.html", context)
    try:
        context["preview"] = compaction_preview(
            session,
            strategy=form.cleaned_data["strategy"],
            instructions=form.cleaned_data["instructions"] or "",
            retain_last_turns=form.cleaned_data["retain_last_turns"],
        )
    except (ServiceError, EngineValidationError) as exc:
        context["error"] = exc.message
        return render(request, "partials/_error.html", context)
    return render(request, f"{PANELS}#compact-preview", context)


@require_GET
@operator_required
def compaction_status(request: HtmxHttpRequest, pk: int, run_id: str) -> HttpResponse:
    """One poll of a run: queued → running → succeeded / failed.

    A finished run answers 286 (htmx stops polling) and tells the page, with
    HX-Trigger, to reload what the compaction changed."""
    session = session_for_operator(pk)
    run = run_for_operator(session, run_id)
    response = render(request, f"{PANELS}#run-status", {"session": session, "run": run})
    if run.is_finished:
        response.status_code = HTMX_STOP_POLLING
        if run.changed:
            trigger_client_event(response, WINDOW_CHANGED)
        trigger_client_event(response, COMPACTION_FINISHED)
    return response


@require_GET
@operator_required
def compaction_history(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The Compactions tab: runs newest first, restores, the live snapshot."""
    session = session_for_operator(pk)
    return render(request, f"{PANELS}#compactions", _history_context(session))


def _history_context(session: Session, **extra: Any) -> dict[str, Any]:
    return {
        "session": session,
        "runs": compaction_runs(session),
        "restores": restore_snapshots(session),
        "live_snapshot_id": live_snapshot_id(session),
        **extra,
    }


@require_GET
@operator_required
def snapshot_detail(request: HtmxHttpRequest, pk: int, snapshot_id: int) -> HttpResponse:
    """A snapshot's before / after."""
    session = session_for_operator(pk)
    snapshot = snapshot_for_operator(session, snapshot_id)
    diff = snapshot_diff(session, snapshot)
    return render(request, f"{PANELS}#snapshot", {"session": session, "diff": diff})


@require_POST
@operator_required
def snapshot_restore(
    request: HtmxHttpRequest, pk: int, snapshot_id: int | None = None
) -> HttpResponse:
    """Make an earlier snapshot (or, without an id, the uncompacted transcript) live again."""
    session = session_for_operator(pk)
    if snapshot_id is not None:
        snapshot_for_operator(session, snapshot_id)  # 404 before any write
    try:
        restored = snapshot_restore_service(session=session, snapshot_id=snapshot_id)
    except ServiceError as exc:
        context = _history_context(session, restore_error=exc.message)
        return render(request, f"{PANELS}#compactions", context)
    session = session_for_operator(pk)
    context = _history_context(session, restored=restored)
    response = render(request, f"{PANELS}#compactions", context)
    trigger_client_event(response, WINDOW_CHANGED)
    return response
