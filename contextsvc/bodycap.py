"""The API's JSON bodies have a cap of their own, checked from ``Content-Length``
before the body is read.

A JSON body is held whole and parsed while the worker holds the GIL: a 30 MB
append took ~0.43 s of it (reading the body, ``orjson.loads``, the NUL scan,
handing it to psycopg), and every other request on that worker (the other
keys' keep-alive connections live there) waited meanwhile. Real tool results
are kilobytes, rarely a megabyte; a bigger output has a path that never parses
JSON: the streamed raw upload (``PUT /api/v1/sessions/{sid}/outputs``,
docs/tool-output-cache.md), after which the tool message carries its
``output_ref``. So a JSON body over ``CONTEXTSVC_MAX_API_JSON_BYTES`` under
``/api/`` is answered 413 from its headers alone, naming the limit and that
upload. The raw upload itself is exempt (it has its own limit,
``CONTEXTSVC_MAX_UPLOAD_BYTES``).

The body is never read: the connection is closed rather than drained, and
after the refusal hold (``CONTEXTSVC_REFUSAL_HOLD_SECONDS``), so a client that
resends the same body at once cannot make the worker accept and answer it
thousands of times a second. A body without ``Content-Length`` is never read
by Django under WSGI, so the header is the whole truth there. The proxy
process does not use this: a provider call carries the agent's whole history
and may be tens of megabytes (its limit is ``CONTEXTSVC_MAX_JSON_BODY``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from contextsvc.errors import error_body
from contextsvc.http import json_response
from contextsvc.ratelimit.hold import hold
from contextsvc.ratelimit.wsgi import content_length, unread_body_ends_connection

API_PREFIX = "/api/"
# The one API route whose body is raw bytes, streamed to storage.
_RAW_UPLOAD = re.compile(r"^/api/v1/sessions/(?P<sid>[^/]+)/outputs/?$")
_SESSION = re.compile(r"^/api/v1/sessions/(?P<sid>[^/]+)/")


def oversized(request: HttpRequest) -> int | None:
    """The declared body size when it is a JSON body over the API's cap, else None."""
    path = request.path_info
    if not path.startswith(API_PREFIX):
        return None
    size = content_length(request.META)
    if size <= settings.CONTEXTSVC_MAX_API_JSON_BYTES:
        return None
    if request.method == "PUT" and _RAW_UPLOAD.match(path):
        return None
    return size


def too_large(request: HttpRequest, size: int) -> HttpResponse:
    """The 413: the limit, the size, and the upload to use instead."""
    limit = settings.CONTEXTSVC_MAX_API_JSON_BYTES
    session = _SESSION.match(request.path_info)
    upload = f"PUT /api/v1/sessions/{session['sid'] if session else '{sid}'}/outputs"
    message = (
        f"JSON body of {size} bytes is over the API's limit of {limit} bytes "
        f"({limit / 1_048_576:g} MiB, CONTEXTSVC_MAX_API_JSON_BYTES). Upload a large "
        f"tool output raw with {upload} (streamed, never parsed as JSON) and send the "
        'tool message with its "output_ref" instead of its content.'
    )
    details = {"field": "Content-Length", "limit": limit, "size": size, "upload": upload}
    return json_response(error_body("PAYLOAD_TOO_LARGE", message, details), status=413)


class JsonBodyCapMiddleware:
    """Near the top of the web process's middleware: refuses an oversized API
    JSON body before anything reads it (``oversized``)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        size = oversized(request)
        if size is None:
            return self.get_response(request)
        unread_body_ends_connection(request.META)
        hold(settings.CONTEXTSVC_REFUSAL_HOLD_SECONDS)
        return too_large(request, size)
