"""Request ids on every response, and the answers for failures no handler expected.

A lost or unreachable database is a 503 with ``Retry-After`` (JSON under the
API, a plain page elsewhere), never a 500: Django's error wrapper has already
marked the connection and drops it when the request ends, so the client's
retry gets a fresh one. Any other unexpected exception under the API is
DESIGN.md's JSON error body with a request id, logged with its traceback.
"""

from __future__ import annotations

import logging
import re
import sys
import uuid
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from csp.middleware import CSPMiddleware
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.views import defaults

from contextsvc.errors import error_body
from contextsvc.http import json_response

logger = logging.getLogger("contextsvc.errors")

REQUEST_ID_HEADER = "X-Request-Id"
# A client's own id is kept when it is one a log line can carry safely
# (UUIDs, trace ids); anything else is replaced, never echoed.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# Long enough for a new connection (or a failover) to come up, short enough
# that an agent barely notices.
RETRY_AFTER_SECONDS = 1
# What a dropped, refused or restarting database raises through Django's
# wrapper; DataError/IntegrityError and the like are bugs or bad input instead.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)

_UNAVAILABLE_PAGE = (
    "<!doctype html><title>Service unavailable</title>"
    "<h1>Service unavailable</h1><p>The database cannot be reached right now. "
    "Reload the page in a moment.</p>"
)


def request_id(request: HttpRequest) -> str:
    """This request's id: the client's ``X-Request-Id`` when sane, else a new one."""
    rid = getattr(request, "request_id", None)
    if rid is None:
        # META, not request.headers: that builds a dict of every header first.
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")
        rid = request.request_id = sane_request_id(incoming)
    return rid


def sane_request_id(incoming: str) -> str:
    """The client's request id when a log line can carry it safely, else a new one."""
    return incoming if _SANE_REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def database_unavailable(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """503 + Retry-After for a request that found the database gone.

    Builds the answer without touching the database (no templates, no
    session, no user), so it is as quick as the failure was.
    """
    rid = request_id(request)
    logger.warning(
        "database unavailable [request_id=%s] %s %s: %s",
        rid,
        request.method,
        request.path,
        str(exc).strip() or type(exc).__name__,
    )
    if _is_api(request):
        response = json_response(
            error_body(
                "SERVICE_UNAVAILABLE",
                f"The database is unavailable; retry in {RETRY_AFTER_SECONDS} s "
                "(send the same Idempotency-Key so a retried write is applied once).",
                {"request_id": rid},
            ),
            status=503,
        )
    else:
        response = HttpResponse(_UNAVAILABLE_PAGE, status=503, content_type="text/html")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response[REQUEST_ID_HEADER] = rid
    return response


def internal_error(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """JSON 500 naming the request id; the traceback goes to the log under that id."""
    rid = request_id(request)
    logger.error(
        "unexpected error [request_id=%s] %s %s",
        rid,
        request.method,
        request.path,
        exc_info=(type(exc), exc, exc.__traceback__),
    )
    response = json_response(
        error_body(
            "INTERNAL_ERROR",
            f"Unexpected server error; quote request id {rid} when reporting it.",
            {"request_id": rid},
        ),
        status=500,
    )
    response[REQUEST_ID_HEADER] = rid
    return response


class RequestIdMiddleware:
    """Outermost middleware: ``X-Request-Id`` on every response, and the
    database-unavailable answer for any view (the dashboard's too)."""

    # Both: under ASGI (the proxy process) an async chain runs without a thread hop.
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        rid = request_id(request)
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = rid
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        rid = request_id(request)
        response = await self.get_response(request)
        response[REQUEST_ID_HEADER] = rid
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DATABASE_UNAVAILABLE):
            return database_unavailable(request, exception)
        return None


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: an unknown URL under the API is DESIGN.md's JSON 404, not a page."""
    if not _is_api(request):
        return defaults.page_not_found(request, exception)
    response = json_response(
        error_body("NOT_FOUND", f"No API operation at {request.path}", {"path": request.path}),
        status=404,
    )
    response[REQUEST_ID_HEADER] = request_id(request)
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: what escaped the views and middleware.

    Django calls it while handling the exception, so ``sys.exc_info()`` is it.
    """
    exc = sys.exc_info()[1]
    if isinstance(exc, DATABASE_UNAVAILABLE):
        return database_unavailable(request, exc)
    if _is_api(request) and exc is not None:
        return internal_error(request, exc)
    return defaults.server_error(request)


class DocumentCSPMiddleware(CSPMiddleware):
    """django-csp's policy on pages, not on the API's JSON answers.

    A JSON answer (served with ``nosniff``) runs no script, so the policy does
    nothing there, and building it costs ~70 µs a call: a fiftieth of an
    append. The API's docs page is HTML and keeps its policy.
    """

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        return super().process_response(request, response)
