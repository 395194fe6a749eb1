"""Agent API for compaction: parse → call a service or selector → return data."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema, Status
from pydantic import Field

from contextsvc.errors import NotFound
from contextsvc.http import json_response
from contextsvc.openapi import ErrorOut, declare_errors
from prompting.context.service import context_for_call
from sessions import selectors as session_selectors
from sessions.models import Session

from . import reasons, selectors
from .schemas import CompactIn, OverflowIn
from .schemas_out import (
    CompactOut,
    OverflowOut,
    RestoreOut,
    ResumeOut,
    RunDetailOut,
    RunListOut,
    SnapshotListOut,
)
from .services.requests import compaction_recover, compaction_request
from .services.snapshots import snapshot_restore
from .services.sync import compaction_overflow, compaction_run_sync, raise_for_failure

router = Router(tags=["compaction"])


def _session(request: HttpRequest, sid: str) -> Session:
    return session_selectors.session_get(owner=request.auth, external_id=sid)


@router.post(
    "/sessions/{sid}/compact",
    response={200: CompactOut, 202: CompactOut, 409: ErrorOut},
    exclude_unset=True,
)
def compact(request: HttpRequest, sid: str, payload: CompactIn) -> Status:
    """docs/concepts/compaction.md#forced-runs: a forced compaction; ``wait`` runs it in the
    request."""
    session = _session(request, sid)
    run, created = compaction_request(
        session=session,
        trigger="manual",
        reason=reasons.manual_api(session, request.auth),
        strategy=payload.strategy,
        instructions=payload.instructions,
        retain_last_turns=payload.retain_last_turns,
        enqueue=not payload.wait,
    )
    if not payload.wait:
        return Status(202, {"run_id": str(run.pk), "status": run.status, "joined": not created})
    run = compaction_run_sync(run=run)
    raise_for_failure(run)
    status = 200 if run.is_finished else 202
    return Status(
        status,
        {
            "run_id": str(run.pk),
            "status": run.status,
            "joined": not created,
            "result": selectors.compact_result(run),
            "changed": run.changed,
            "retention_score": run.retention_score,
        },
    )


@router.get("/compactions/{run_id}", response=RunDetailOut, exclude_unset=True)
def get_compaction(request: HttpRequest, run_id: str) -> dict[str, Any]:
    run = selectors.run_get(owner=request.auth, run_id=run_id)
    # A client polling a run whose worker died sees it requeued (or failed), not "running".
    compaction_recover(run)
    return selectors.run_to_dict(run)


class RunListQuery(Schema):
    limit: int = Field(20, ge=1, le=200)


# exclude_unset: a reason lists only its kind's keys.
@router.get("/sessions/{sid}/compactions", response=RunListOut, exclude_unset=True)
def list_compactions(request: HttpRequest, sid: str, q: Query[RunListQuery]) -> dict[str, Any]:
    session = _session(request, sid)
    runs = selectors.run_list(session=session, limit=q.limit)
    return {"items": [selectors.run_to_dict(r, detail=False) for r in runs]}


# Declared, not validated: the handler returns its pre-rendered body as is.
@router.get("/sessions/{sid}/snapshot", response=ResumeOut)
def get_snapshot(request: HttpRequest, sid: str) -> HttpResponse:
    """docs/concepts/compaction.md#resume: the newest snapshot plus the messages after it."""
    return json_response(selectors.session_resume(_session(request, sid)))


@router.get("/sessions/{sid}/snapshots", response=SnapshotListOut)
def list_snapshots(request: HttpRequest, sid: str) -> dict[str, Any]:
    return {"items": selectors.snapshot_list(session=_session(request, sid))}


@router.post("/sessions/{sid}/snapshots/{snapshot_id}/restore", response=RestoreOut)
def restore_snapshot(request: HttpRequest, sid: str, snapshot_id: str) -> dict[str, Any]:
    """Make snapshot ``snapshot_id`` (or ``uncompacted``: the whole transcript) live again."""
    session = _session(request, sid)
    if snapshot_id == "uncompacted":
        target = None
    elif snapshot_id.isascii() and snapshot_id.isdigit() and len(snapshot_id) <= 18:
        # isdigit alone accepts "³", which int() refuses; 18 digits fit a bigint.
        target = int(snapshot_id)
    else:
        raise NotFound(f"Snapshot {snapshot_id!r} not found")
    snapshot = snapshot_restore(session=session, snapshot_id=target)
    session.refresh_from_db()
    return {
        "snapshot": selectors.snapshot_to_dict(snapshot, with_messages=False),
        "session": session_selectors.session_to_dict(session),
    }


class ContextFormat(Schema):
    format: str = "anthropic"


# Declared, not validated: the handler returns its pre-rendered body as is.
@router.post("/sessions/{sid}/overflow", response={200: OverflowOut, 409: ErrorOut})
def overflow(
    request: HttpRequest, sid: str, payload: OverflowIn, q: Query[ContextFormat]
) -> HttpResponse:
    """docs/concepts/compaction.md#emergency: the provider said "context too long".

    Drops the oldest turns now (synchronously) and answers with the new context.
    """
    session = _session(request, sid)
    run = compaction_overflow(
        session=session,
        detail=payload.detail,
        reported_tokens=payload.reported_tokens,
        source="api",
    )
    raise_for_failure(run)
    session.refresh_from_db()
    body = context_for_call(session=session, fmt=q.format, preflight=False)
    body["compaction"] = selectors.run_to_dict(run, detail=False)
    return json_response(body)


declare_errors(router)
