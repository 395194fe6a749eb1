"""Service-level errors and the one JSON error body of DESIGN.md.

Services raise these; the API root turns each into
``{"error": {"code", "message", "details"}}`` with the matching status.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    code = "VALIDATION_ERROR"
    status = 422

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, self.details)


class ValidationFailed(ServiceError):
    code, status = "VALIDATION_ERROR", 422


class NotFound(ServiceError):
    code, status = "NOT_FOUND", 404


class Conflict(ServiceError):
    code, status = "CONFLICT", 409


class CompressionNotNeeded(ServiceError):
    # docs/concepts/compaction.md#compression-not-needed: a conversation too short to compress; a
    # clear error, not a no-op.
    code, status = "COMPRESSION_NOT_NEEDED", 409


class Unavailable(ServiceError):
    code, status = "SERVICE_UNAVAILABLE", 503


class Unauthorized(ServiceError):
    code, status = "UNAUTHORIZED", 401


class Forbidden(ServiceError):
    # A valid credential that may not do this (an agent key writing prices).
    code, status = "FORBIDDEN", 403


class PayloadTooLarge(ServiceError):
    code, status = "PAYLOAD_TOO_LARGE", 413


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}
