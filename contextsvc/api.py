"""The agent API root: /api/v1 (django-ninja), docs at /api/v1/docs.

Every error leaves here in DESIGN.md's body. Routers stay thin: they parse,
call a service or selector, and return plain data.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from contextsvc import body_gate
from contextsvc.engine.errors import EngineUnavailableError, EngineValidationError
from contextsvc.errors import ServiceError, error_body
from contextsvc.http import ORJSONParser, ORJSONRenderer
from contextsvc.middleware import database_unavailable, internal_error
from contextsvc.ratelimit import RateLimited, hold_refused
from contextsvc.ratelimit.wsgi import unread_body_ends_connection
from sessions.auth import AgentKeyAuth

api = NinjaAPI(
    title="contextsvc",
    version="1",
    description="Keeps LLM agents inside their context window.",
    urls_namespace="api-v1",
    auth=AgentKeyAuth(),
    parser=ORJSONParser(),
    renderer=ORJSONRenderer(),
    docs_url="/docs",
)


def _error(
    request: HttpRequest, status: int, code: str, message: str, details: Any = None
) -> HttpResponse:
    return api.create_response(request, error_body(code, message, details), status=status)


_LOC_NOISE = {"body", "query", "path", "header", "data", "payload", "q", "filters"}


def _field_name(loc: Any) -> str:
    # ninja prefixes locations with the source and the handler's parameter
    # name ("body", "payload", ...); the client knows neither.
    parts = [str(p) for p in loc if p not in _LOC_NOISE]
    return ".".join(parts) or "body"


@api.exception_handler(NinjaValidationError)
def on_validation_error(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    errors = [
        {"field": _field_name(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type")}
        for e in exc.errors
    ]
    summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
    return _error(request, 422, "VALIDATION_ERROR", summary or "Invalid input", errors)


@api.exception_handler(ServiceError)
def on_service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    return api.create_response(request, exc.body(), status=exc.status)


@api.exception_handler(RateLimited)
def on_rate_limited(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = on_service_error(request, exc)
    response["Retry-After"] = str(exc.retry_after)
    response._has_been_logged = True  # a flood's refusals would flood the log as warnings
    # Refused at auth, before its body was read: not drained either.
    unread_body_ends_connection(request.META)
    hold_refused(exc)
    return response


@api.exception_handler(EngineValidationError)
def on_engine_validation(request: HttpRequest, exc: EngineValidationError) -> HttpResponse:
    details = {"field": exc.field} if getattr(exc, "field", None) else getattr(exc, "details", None)
    return _error(request, 422, "VALIDATION_ERROR", exc.message, details)


@api.exception_handler(EngineUnavailableError)
def on_engine_unavailable(request: HttpRequest, exc: EngineUnavailableError) -> HttpResponse:
    return _error(request, 503, "SERVICE_UNAVAILABLE", str(exc))


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _error(
        request, 401, "UNAUTHORIZED", "Missing or invalid agent key (Authorization: Bearer <key>)"
    )


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(request, 404, "NOT_FOUND", str(exc) or "Not found")


@api.exception_handler(RequestDataTooBig)
def on_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return _error(
        request,
        413,
        "PAYLOAD_TOO_LARGE",
        f"Request body exceeds {body_gate.body_limit(request.path)} bytes; "
        "upload large tool outputs with PUT /api/v1/sessions/{sid}/outputs",
    )


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cause = exc.__cause__
    if isinstance(cause, ServiceError):  # raised while parsing the body (a NUL)
        return on_service_error(request, cause)
    if isinstance(cause, (orjson.JSONDecodeError, json.JSONDecodeError, ValueError)):
        return _error(
            request, 422, "VALIDATION_ERROR", f"Malformed JSON body: {cause}", {"field": "body"}
        )
    if isinstance(cause, RequestDataTooBig):
        return on_too_big(request, cause)
    codes = {
        400: "VALIDATION_ERROR",
        401: "UNAUTHORIZED",
        403: "FORBIDDEN",
        404: "NOT_FOUND",
        409: "CONFLICT",
        413: "PAYLOAD_TOO_LARGE",
    }
    status = 422 if exc.status_code == 400 else exc.status_code
    return _error(request, status, codes.get(exc.status_code, "VALIDATION_ERROR"), str(exc))


# A lost database connection: 503 + Retry-After (the connection is dropped at
# the end of the request); anything else unexpected: JSON 500 with a request id.
api.add_exception_handler(OperationalError, database_unavailable)
api.add_exception_handler(InterfaceError, database_unavailable)
api.add_exception_handler(Exception, internal_error)


api.add_router("/", "sessions.api.router")
api.add_router("/", "sessions.api_outputs.router")
api.add_router("/", "sessions.api_transcript.router")
api.add_router("/", "sessions.api_models.router")
api.add_router("/", "prompting.api.router")
api.add_router("/", "compaction.api.router")
