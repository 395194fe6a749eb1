"""Errors the engine raises; the API layer maps them to HTTP responses.

``EngineValidationError`` → 422 ``VALIDATION_ERROR`` and
``EngineUnavailableError`` → 503 ``SERVICE_UNAVAILABLE`` (DESIGN.md, API
contract). The engine never imports Django, so these are plain exceptions that
carry what the error body needs (``message``, ``field``, ``details``).
"""

from __future__ import annotations

from typing import Any


class EngineValidationError(ValueError):
    """Input the engine cannot work with (docs/concepts/context-build.md#limit-validation → 422)."""

    def __init__(self, message: str, *, field: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """The ``details`` part of the API error body (the code is the caller's)."""
        out: dict[str, Any] = {"message": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.details is not None:
            out["details"] = self.details
        return out


class CompressionNotNeededError(EngineValidationError):
    """A forced compression of a conversation too short to compress
    (docs/concepts/compaction.md#compression-not-needed: no middle between the preserved top and
    bottom) → 409 COMPRESSION_NOT_NEEDED."""

    code = "COMPRESSION_NOT_NEEDED"


class EngineUnavailableError(RuntimeError):
    """A dependency the engine needs is not there (docs/concepts/compaction.md#summarizer-failure →
    503)."""
