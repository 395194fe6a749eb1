"""Typed exceptions: one class per error code of the service's error body.

The service answers every failure with ``{"error": {"code", "message",
"details"}}`` and a matching status; :func:`error_from_response` turns that
into the class registered for the code, so callers catch what they mean
(``except NotFoundError``) and still see the code, details and request id.
"""

from __future__ import annotations

from typing import Any

import httpx


class ContextsvcError(Exception):
    """A failed call: ``code`` is the service's error code, ``status`` the HTTP status."""

    code: str = "ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        details: Any = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status
        self.details = details
        self.request_id = request_id

    def __str__(self) -> str:
        where = f" (HTTP {self.status})" if self.status else ""
        return f"{self.code}{where}: {self.message}"


class ValidationError(ContextsvcError):
    code = "VALIDATION_ERROR"

    @property
    def field(self) -> str | None:
        """The request field the service named, when it named one."""
        details = self.details
        if isinstance(details, dict):
            return details.get("field")
        if isinstance(details, list) and details and isinstance(details[0], dict):
            return details[0].get("field")
        return None


class NotFoundError(ContextsvcError):
    code = "NOT_FOUND"


class ConflictError(ContextsvcError):
    code = "CONFLICT"


class UnauthorizedError(ContextsvcError):
    code = "UNAUTHORIZED"


class PayloadTooLargeError(ContextsvcError):
    code = "PAYLOAD_TOO_LARGE"


class RateLimitedError(ContextsvcError):
    code = "RATE_LIMITED"


class ServiceUnavailableError(ContextsvcError):
    code = "SERVICE_UNAVAILABLE"


class ConnectionFailedError(ContextsvcError):
    """The service could not be reached (after the retries): no HTTP answer at all."""

    code = "CONNECTION_ERROR"


_BY_CODE: dict[str, type[ContextsvcError]] = {
    cls.code: cls
    for cls in (
        ValidationError,
        NotFoundError,
        ConflictError,
        UnauthorizedError,
        PayloadTooLargeError,
        RateLimitedError,
        ServiceUnavailableError,
    )
}
_BY_STATUS = {422: "VALIDATION_ERROR", 404: "NOT_FOUND", 409: "CONFLICT", 401: "UNAUTHORIZED"}
_BY_STATUS |= {413: "PAYLOAD_TOO_LARGE", 429: "RATE_LIMITED", 503: "SERVICE_UNAVAILABLE"}


def error_from_response(response: httpx.Response) -> ContextsvcError:
    """The exception for a non-2xx answer (a body that is not the service's shape still maps by status)."""
    code, message, details = None, "", None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        code, message, details = error.get("code"), error.get("message") or "", error.get("details")
    code = code or _BY_STATUS.get(response.status_code, f"HTTP_{response.status_code}")
    cls = _BY_CODE.get(code, ContextsvcError)
    return cls(
        message or response.reason_phrase or "request failed",
        code=code,
        status=response.status_code,
        details=details,
        request_id=response.headers.get("x-request-id"),
    )
