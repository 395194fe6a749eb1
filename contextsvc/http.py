"""orjson parser/renderer for the API and a response helper for big bodies."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from ninja.parser import Parser
from ninja.renderers import BaseRenderer

from contextsvc import nul


class ORJSONParser(Parser):
    def parse_body(self, request: HttpRequest) -> Any:
        data = orjson.loads(request.body)
        # Every JSON body passes here: the one place NULs are refused (a 422
        # naming the field) before anything reaches the database.
        nul.reject_in_body(request.body, data)
        return data


class ORJSONRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> bytes:
        return orjson.dumps(data, default=_json_default)


def _json_default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def json_response(data: Any, status: int = 200) -> HttpResponse:
    """For handlers that build big bodies themselves (the context endpoint)."""
    return HttpResponse(
        orjson.dumps(data, default=_json_default), status=status, content_type="application/json"
    )
