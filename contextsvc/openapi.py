"""The error body of DESIGN.md as a schema, and the error responses each API operation declares."""

from __future__ import annotations

from typing import Any

from ninja import Router
from pydantic import BaseModel, ConfigDict, Field

# Writes take a body: too big a body is a 413 whatever the operation.
_BODY_METHODS = {"POST", "PUT", "PATCH"}

# gunicorn answers a request line over its limit (4,094 bytes) itself, before
# the API: any operation with a long enough path id or query string.
_URI_TOO_LONG = {
    414: {
        "description": "URI Too Long: from the web server, an HTML page (not the error body)",
        "content": {"text/html": {"schema": {"type": "string"}}},
    }
}


class ErrorDetail(BaseModel):
    # Open: a handler may add context (a request id) beside the three fields.
    model_config = ConfigDict(extra="allow")

    code: str = Field(
        ...,
        description=(
            "VALIDATION_ERROR, NOT_FOUND, CONFLICT, PAYLOAD_TOO_LARGE, UNAUTHORIZED, "
            "FORBIDDEN, RATE_LIMITED, SERVICE_UNAVAILABLE, ..."
        ),
    )
    message: str
    details: Any = Field(
        ...,
        description="null, {'field': ...} naming the bad field, or a list of such entries (422)",
    )


class ErrorOut(BaseModel):
    """``{"error": {"code", "message", "details"}}``: every 4xx/5xx of the API."""

    error: ErrorDetail


def declare_errors(router: Router) -> None:
    """Add the error responses to every operation of ``router`` (call it after the last one).

    Each operation can answer 401 (no or a bad key), 429 (the key's rate or
    concurrency limit), 503 (the database or the worker is away); with any
    input also 422; with a path id 404 (another key's ids too); with a body 413.
    409 is declared on the operations that can conflict, in their ``response``.
    And 414, which the web server answers for too long a request line.
    """
    for path, path_view in router.path_operations.items():
        for operation in path_view.operations:
            statuses = {401, 429, 503}
            if operation.models:
                statuses.add(422)
            if "{" in path:
                statuses.add(404)
            if _BODY_METHODS & set(operation.methods):
                statuses.add(413)
            for status in sorted(statuses - set(operation.response_models)):
                operation.response_models[status] = operation._create_response_model(ErrorOut)
            extra = dict(operation.openapi_extra or {})
            extra["responses"] = {**_URI_TOO_LONG, **extra.get("responses", {})}
            operation.openapi_extra = extra
