"""Agent API for prompting: the context to send next (``GET /sessions/{sid}/context``)."""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema
from pydantic import Field

from contextsvc.http import json_response
from contextsvc.openapi import declare_errors
from sessions.models import Session
from sessions.schemas_base import MAX_TOKENS
from sessions.schemas_out import ContextOut
from sessions.selectors import session_get

from .context.service import context_for_call

router = Router(tags=["sessions"])


def _session(request: HttpRequest, sid: str) -> Session:
    cached = getattr(request, "contextsvc_session", None)  # loaded by AgentKeyAuth
    if cached is not None and cached.external_id == sid:
        return cached
    return session_get(owner=request.auth, external_id=sid, defer_tools=True)


class ContextQuery(Schema):
    format: str = Field("anthropic", max_length=20)
    extra_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    # docs/api.md#context-purpose: "call" when the body goes to a model next (a
    # priced, recorded call), "read" for a look at it. Default: "read" for
    # ``format=raw`` (no model takes it), "call" for a provider format.
    purpose: Literal["call", "read"] | None = None


# Declared, not validated: the handler returns its pre-rendered body as is.
# The operation id it had when sessions served it: generated clients keep their method name.
@router.get("/sessions/{sid}/context", response=ContextOut, operation_id="sessions_api_get_context")
def get_context(request: HttpRequest, sid: str, q: Query[ContextQuery]) -> HttpResponse:
    session = _session(request, sid)
    purpose = q.purpose or ("read" if q.format == "raw" else "call")
    body = context_for_call(
        session=session, fmt=q.format, extra=q.extra_tokens, read=purpose == "read"
    )
    # Built by hand with orjson: a 1,000-message body is the hot read path.
    return json_response(body)


declare_errors(router)
