"""Agent API for sessions: parse → call a service or selector → return data."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import HttpRequest
from ninja import Body, Header, Query, Router, Schema, Status
from pydantic import Field

from contextsvc import nul
from contextsvc.http import json_response
from contextsvc.openapi import ErrorOut, declare_errors

from . import selectors, services
from .schemas import (
    MAX_ID,
    MAX_TOKENS,
    AppendIn,
    SectionIn,
    SessionCreateIn,
    SessionPatchIn,
    ToolDefIn,
    UsageIn,
)
from .schemas_out import (
    AppendOut,
    BudgetDetailOut,
    BuiltinToolsOut,
    SectionsOut,
    SessionListOut,
    SessionOut,
    ToolNamesOut,
    UsageOut,
)

router = Router(tags=["sessions"])


def _owner(request: HttpRequest):
    return request.auth


def _session(request: HttpRequest, sid: str, *, defer_tools: bool = False):
    cached = getattr(request, "contextsvc_session", None)  # loaded by AgentKeyAuth
    if cached is not None and cached.external_id == sid:
        return cached
    return selectors.session_get(owner=_owner(request), external_id=sid, defer_tools=defer_tools)


class ListFilters(Schema):
    agent: str | None = Field(None, max_length=100)
    status: str | None = Field(None, pattern="^(active|final)$")
    cursor: int | None = Field(None, ge=1, le=MAX_ID)
    limit: int = Field(50, ge=1, le=200)


@router.post("/sessions", response={201: SessionOut, 409: ErrorOut})
def create_session(request: HttpRequest, payload: SessionCreateIn):
    data = payload.model_dump(exclude_unset=True)
    data["policy"] = payload.policy.model_dump(exclude_unset=True)
    session = services.session_create(owner=_owner(request), data=data)
    return Status(201, selectors.session_to_dict(session))


@router.get("/sessions", response=SessionListOut)
def list_sessions(request: HttpRequest, filters: Query[ListFilters]):
    nul.reject_in_text(filters.agent, "agent")
    page, next_cursor = selectors.session_list(owner=_owner(request), **filters.model_dump())
    return {"items": [selectors.session_to_dict(s) for s in page], "next_cursor": next_cursor}


@router.get("/sessions/{sid}", response=SessionOut)
def get_session(request: HttpRequest, sid: str):
    return selectors.session_to_dict(_session(request, sid))


@router.patch("/sessions/{sid}", response=SessionOut)
def patch_session(request: HttpRequest, sid: str, payload: SessionPatchIn):
    data = payload.model_dump(exclude_unset=True)
    if payload.policy is not None:
        data["policy"] = payload.policy.model_dump(exclude_unset=True)
    # One transaction with the answer: a PATCH that cannot be answered is not kept.
    with transaction.atomic():
        session = services.session_update(session=_session(request, sid), data=data)
        return selectors.session_to_dict(session)


@router.put("/sessions/{sid}/system", response=SectionsOut)
def put_system(request: HttpRequest, sid: str, payload: list[SectionIn]):
    session = services.session_set_sections(
        session=_session(request, sid), sections=[s.model_dump() for s in payload]
    )
    return {"sections": session.sections, "budget": selectors.session_to_dict(session)["budget"]}


@router.put("/sessions/{sid}/tools", response=ToolNamesOut)
def put_tools(request: HttpRequest, sid: str, payload: list[ToolDefIn]):
    session = services.session_set_tools(
        session=_session(request, sid), tools=[t.model_dump() for t in payload]
    )
    return {
        "tools": [t["name"] for t in session.tools],
        "budget": selectors.session_to_dict(session)["budget"],
    }


@router.post("/sessions/{sid}/messages", response={200: AppendOut, 409: ErrorOut})
def post_messages(
    request: HttpRequest,
    sid: str,
    payload: AppendIn,
    idempotency_key: str | None = Header(None, alias="Idempotency-Key", max_length=200),
):
    nul.reject_in_text(idempotency_key, "Idempotency-Key")
    session = _session(request, sid)
    messages = [m.model_dump() for m in payload.messages]
    # Pre-rendered like the context: the hot path skips re-validating its own
    # answer against AppendOut (~55 µs); the contract tests hold it to the schema.
    return json_response(
        services.session_append_messages(
            session=session,
            messages=messages,
            idempotency_key=idempotency_key,
            fingerprint=services.request_fingerprint(messages) if idempotency_key else "",
        )
    )


class BudgetQuery(Schema):
    extra_tokens: int = Field(0, ge=0, le=MAX_TOKENS)


@router.get("/sessions/{sid}/budget", response=BudgetDetailOut, exclude_unset=True)
def get_budget(request: HttpRequest, sid: str, q: Query[BudgetQuery]):
    from .accounting import compute_budget

    session = _session(request, sid)
    out: dict[str, Any] = compute_budget(session, extra=q.extra_tokens).to_dict()
    out["status"] = session.status
    out["final_reason"] = session.final_reason or None
    out["usage_reports"] = selectors.session_usage_reports(session)
    # The other apps' blocks: prompting's cache estimate vs reported usage,
    # deferral and degradations; compaction's auto-compaction and circuit breaker.
    out.update(selectors.app_budget_blocks(session))
    return out


@router.post("/sessions/{sid}/usage", response=UsageOut)
def post_usage(request: HttpRequest, sid: str, payload: UsageIn):
    report, state = services.session_record_usage(
        session=_session(request, sid), usage=payload.model_dump()
    )
    return {
        "total_tokens": report.total_tokens,
        "estimated_tokens": report.estimated_tokens,
        "through_seq": report.through_seq,
        "budget": state.to_dict(),
    }


# --- built-in tools -------------------------------------------------------------


@router.get("/tools", tags=["tools"], response=BuiltinToolsOut)
def list_builtin_tools(request: HttpRequest):
    from . import builtin_tools

    defs = builtin_tools.definitions()
    return {
        "anthropic": [builtin_tools.as_format(t, "anthropic") for t in defs],
        "openai": [builtin_tools.as_format(t, "openai") for t in defs],
    }


@router.post(
    "/sessions/{sid}/tools/{name}/call",
    tags=["tools"],
    response={200: dict[str, Any], 409: ErrorOut},
)
def call_builtin_tool(request: HttpRequest, sid: str, name: str, payload: Body[dict[str, Any]]):
    from . import builtin_tools

    return builtin_tools.call(_session(request, sid, defer_tools=True), name, payload)


declare_errors(router)
