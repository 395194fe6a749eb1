"""orjson parser/renderer for the API and a response helper for big bodies."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from ninja.parser import Parser
from ninja.renderers import BaseRenderer

from contextsvc import body_gate, nul
from contextsvc.errors import PayloadTooLarge, ValidationFailed


class ORJSONParser(Parser):
    def parse_body(self, request: HttpRequest) -> Any:
        """The body through the gate (``contextsvc.body_gate``): a 413 or 422 naming the field."""
        raw = request.body  # a declared size over the limit: RequestDataTooBig, before reading
        try:
            body_gate.check_read(raw, body_gate.body_limit(request.path))
            data = body_gate.parse_json(raw)
        except body_gate.BodyRefused as exc:
            error = PayloadTooLarge if exc.status == 413 else ValidationFailed
            raise error(exc.message, details={"field": exc.field}) from exc
        # Every JSON body passes here: the one place NULs are refused (a 422
        # naming the field) before anything reaches the database.
        nul.reject_in_body(raw, data)
        return data


class ORJSONRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> bytes:
        return dumps(data)


def dumps(data: Any) -> bytes:
    """``data`` as JSON; an integer past 64 bits is written as a float, not a 500.

    PostgreSQL's jsonb keeps numbers as numeric and writes a big float (1e23)
    back without its exponent; Django's JSONField then reads an int that orjson
    refuses. The walk runs only on that rare failure, never on the hot path.
    """
    try:
        return orjson.dumps(data, default=_json_default)
    except TypeError as exc:
        if "64-bit" not in str(exc):
            raise
        return orjson.dumps(_wide_ints_as_floats(data), default=_json_default)


def _wide_ints_as_floats(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _wide_ints_as_floats(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_wide_ints_as_floats(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return float(value)
    if hasattr(value, "model_dump"):
        return _wide_ints_as_floats(value.model_dump())
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def json_response(data: Any, status: int = 200) -> HttpResponse:
    """For handlers that build big bodies themselves (the context endpoint)."""
    return HttpResponse(dumps(data), status=status, content_type="application/json")
