"""Agent API for sessions: parse → call a service or selector → return data."""

from __future__ import annotations

from typing import Any, Literal, cast

from django.db import transaction
from django.http import HttpResponse
from ninja import Body, Header, Query, Router, Schema, Status
from pydantic import Field

from contextsvc import nul
from contextsvc.engine import user_agents
from contextsvc.errors import ValidationFailed
from contextsvc.http import json_response
from contextsvc.openapi import ErrorOut, declare_errors

from . import api_transcript, builtin_tools, selectors, selectors_calls
from .accounting import compute_budget
from .auth import ApiRequest
from .models import AgentKey, Session
from .schemas import (
    AppendIn,
    RetractIn,
    SectionIn,
    SessionCreateIn,
    SessionPatchIn,
    ToolDefIn,
    UsageIn,
)
from .schemas_base import MAX_ID, MAX_TOKENS
from .schemas_calls import ContextCallDetailOut
from .schemas_out import (
    AppendOut,
    BudgetDetailOut,
    BuiltinToolResultOut,
    BuiltinToolsOut,
    ContextCallListOut,
    DeletedOut,
    RetractOut,
    SectionsOut,
    SessionListOut,
    SessionOut,
    ToolNamesOut,
    UsageOut,
)
from .schemas_transcript import TranscriptPageOut
from .selectors_call_account import call_account
from .services.append import session_append_messages
from .services.delete import session_delete
from .services.idempotency import request_fingerprint
from .services.inputs import (
    MessageData,
    SectionData,
    SessionCreateData,
    SessionPatchData,
    ToolData,
    UsageData,
)
from .services.native import native_messages
from .services.retract import retract_fingerprint, session_retract_messages
from .services.sessions import session_create, session_set_sections, session_update
from .services.tools import session_set_tools
from .services.usage import session_record_usage

router = Router(tags=["sessions"])


def _owner(request: ApiRequest) -> AgentKey:
    return request.auth


def _session(request: ApiRequest, sid: str, *, defer_tools: bool = False) -> Session:
    cached = request.contextsvc_session  # loaded by AgentKeyAuth
    if cached is not None and cached.external_id == sid:
        return cached
    return selectors.session_get(owner=_owner(request), external_id=sid, defer_tools=defer_tools)


class ListFilters(Schema):
    agent: str | None = Field(None, max_length=100)
    status: str | None = Field(None, pattern="^(active|final)$")
    cursor: int | None = Field(None, ge=1, le=MAX_ID)
    limit: int = Field(50, ge=1, le=200)


@router.post("/sessions", response={201: SessionOut, 409: ErrorOut})
def create_session(request: ApiRequest, payload: SessionCreateIn) -> Status:
    data = cast(SessionCreateData, payload.model_dump(exclude_unset=True))
    data["policy"] = payload.policy.model_dump(exclude_unset=True)
    client = user_agents.client_label(request.headers.get("User-Agent"))
    session = session_create(owner=_owner(request), data=data, client=client)
    return Status(201, selectors.session_to_dict(session))


@router.get("/sessions", response=SessionListOut)
def list_sessions(request: ApiRequest, filters: Query[ListFilters]) -> dict[str, Any]:
    nul.reject_in_text(filters.agent, "agent")
    page, next_cursor = selectors.session_list(owner=_owner(request), **filters.model_dump())
    return {"items": [selectors.session_to_dict(s) for s in page], "next_cursor": next_cursor}


@router.get("/sessions/{sid}", response=SessionOut)
def get_session(request: ApiRequest, sid: str) -> dict[str, Any]:
    return selectors.session_to_dict(_session(request, sid))


@router.patch("/sessions/{sid}", response=SessionOut)
def patch_session(request: ApiRequest, sid: str, payload: SessionPatchIn) -> dict[str, Any]:
    data = cast(SessionPatchData, payload.model_dump(exclude_unset=True))
    if payload.policy is not None:
        data["policy"] = payload.policy.model_dump(exclude_unset=True)
    # One transaction with the answer: a PATCH that cannot be answered is not kept.
    with transaction.atomic():
        session = session_update(
            session=_session(request, sid), data=data, actor=f"agent key {_owner(request).name}"
        )
        return selectors.session_to_dict(session)


@router.delete("/sessions/{sid}", response=DeletedOut)
def delete_session(request: ApiRequest, sid: str) -> dict[str, Any]:
    """Delete the session with its transcript, outputs, snapshots, runs and proxy state."""
    session_delete(session=_session(request, sid))
    return {"id": sid, "deleted": True}


@router.put("/sessions/{sid}/system", response=SectionsOut)
def put_system(request: ApiRequest, sid: str, payload: list[SectionIn]) -> dict[str, Any]:
    sections = [cast(SectionData, s.model_dump()) for s in payload]
    session = session_set_sections(session=_session(request, sid), sections=sections)
    return {"sections": session.sections, "budget": selectors.session_to_dict(session)["budget"]}


@router.put("/sessions/{sid}/tools", response=ToolNamesOut)
def put_tools(request: ApiRequest, sid: str, payload: list[ToolDefIn]) -> dict[str, Any]:
    tools = [cast(ToolData, t.model_dump()) for t in payload]
    session = session_set_tools(session=_session(request, sid), tools=tools)
    return {
        "tools": [t["name"] for t in session.tools],
        "budget": selectors.session_to_dict(session)["budget"],
    }


class AppendQuery(Schema):
    format: Literal["anthropic", "openai", "responses", "gemini"] | None = Field(
        None,
        description="Post messages as the agent holds them for this provider (default: "
        "the service's own shape): Anthropic Messages, OpenAI Chat Completions messages, "
        "OpenAI Responses input items, or Gemini contents",
    )


@router.post("/sessions/{sid}/messages", response={200: AppendOut, 409: ErrorOut})
def post_messages(
    request: ApiRequest,
    sid: str,
    payload: AppendIn,
    q: Query[AppendQuery],
    idempotency_key: str | None = Header(None, alias="Idempotency-Key", max_length=200),
) -> HttpResponse:
    nul.reject_in_text(idempotency_key, "Idempotency-Key")
    session = _session(request, sid)
    if q.format is not None:
        messages = native_messages(q.format, payload.messages, session.open_tool_calls)
    else:
        messages = cast(list[MessageData], [m.model_dump() for m in payload.messages])
    # Pre-rendered like the context: the hot path skips re-validating its own
    # answer against AppendOut (~55 µs); the contract tests hold it to the schema.
    return json_response(
        session_append_messages(
            session=session,
            messages=messages,
            idempotency_key=idempotency_key,
            fingerprint=request_fingerprint(messages) if idempotency_key else "",
        )
    )


# GET of the same path: the transcript, paged (``api_transcript``). Django routes a path
# to the first router that has it, so both methods must be on this one.
router.add_api_operation(
    "/sessions/{sid}/messages",
    ["GET"],
    api_transcript.list_messages,
    response=TranscriptPageOut,
)


@router.post("/sessions/{sid}/messages/retract", response={200: RetractOut, 409: ErrorOut})
def retract_messages(
    request: ApiRequest,
    sid: str,
    payload: RetractIn,
    idempotency_key: str | None = Header(None, alias="Idempotency-Key", max_length=200),
) -> dict[str, Any]:
    """Take the last messages out of the live window; they stay in the transcript, retracted."""
    nul.reject_in_text(idempotency_key, "Idempotency-Key")
    if (payload.last is None) == (payload.from_seq is None):
        field = "from_seq" if payload.last is not None else "last"
        raise ValidationFailed(
            "Give exactly one of last (the last N live messages) or from_seq",
            details={"field": field},
        )
    return session_retract_messages(
        session=_session(request, sid),
        last=payload.last,
        from_seq=payload.from_seq,
        idempotency_key=idempotency_key,
        fingerprint=retract_fingerprint(payload.last, payload.from_seq) if idempotency_key else "",
    )


class BudgetQuery(Schema):
    extra_tokens: int = Field(0, ge=0, le=MAX_TOKENS)


@router.get("/sessions/{sid}/budget", response=BudgetDetailOut, exclude_unset=True)
def get_budget(request: ApiRequest, sid: str, q: Query[BudgetQuery]) -> dict[str, Any]:
    session = _session(request, sid)
    out: dict[str, Any] = compute_budget(session, extra=q.extra_tokens).to_dict()
    out["status"] = session.status
    out["final_reason"] = session.final_reason or None
    out["usage_reports"] = selectors.session_usage_reports(session)
    # The other apps' blocks: prompting's cache estimate vs reported usage,
    # deferral and degradations; compaction's auto-compaction and circuit breaker.
    out.update(selectors.app_budget_blocks(session))
    return out


class CallListQuery(Schema):
    cursor: int | None = Field(None, ge=1, le=MAX_ID)
    limit: int = Field(50, ge=1, le=200)


@router.get("/sessions/{sid}/calls", response=ContextCallListOut)
def list_calls(request: ApiRequest, sid: str, q: Query[CallListQuery]) -> dict[str, Any]:
    """One record per context build, newest first: what was sent, the guard, usage, cost."""
    page, next_cursor = selectors_calls.context_call_page(
        session=_session(request, sid), cursor=q.cursor, limit=q.limit
    )
    return {
        "items": [selectors_calls.context_call_to_dict(c) for c in page],
        "next_cursor": next_cursor,
    }


@router.get("/sessions/{sid}/calls/{call_id}", response=ContextCallDetailOut)
def get_call(request: ApiRequest, sid: str, call_id: str) -> dict[str, Any]:
    """One record with its side-by-side: the client's request beside what was sent."""
    session = _session(request, sid)
    call = selectors_calls.context_call_get(session=session, call_id=call_id)
    return {**selectors_calls.context_call_to_dict(call), "account": call_account(session, call)}


@router.post("/sessions/{sid}/usage", response=UsageOut)
def post_usage(request: ApiRequest, sid: str, payload: UsageIn) -> dict[str, Any]:
    usage = cast(UsageData, payload.model_dump())
    report, state = session_record_usage(session=_session(request, sid), usage=usage)
    return {
        "total_tokens": report.total_tokens,
        "estimated_tokens": report.estimated_tokens,
        "through_seq": report.through_seq,
        "budget": state.to_dict(),
    }


# --- built-in tools -------------------------------------------------------------


@router.get("/tools", tags=["tools"], response=BuiltinToolsOut)
def list_builtin_tools(request: ApiRequest) -> dict[str, Any]:
    defs = builtin_tools.definitions()
    return {
        "anthropic": [builtin_tools.as_format(t, "anthropic") for t in defs],
        "openai": [builtin_tools.as_format(t, "openai") for t in defs],
        "gemini": [builtin_tools.as_format(t, "gemini") for t in defs],
    }


@router.post(
    "/sessions/{sid}/tools/{name}/call",
    tags=["tools"],
    response={200: BuiltinToolResultOut, 409: ErrorOut},
)
def call_builtin_tool(
    request: ApiRequest, sid: str, name: str, payload: Body[dict[str, Any]]
) -> dict[str, Any]:
    return builtin_tools.call(_session(request, sid, defer_tools=True), name, payload)


declare_errors(router)
