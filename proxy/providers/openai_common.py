"""What OpenAI's two APIs (Chat Completions, Responses) share: upstream, key, errors, overflow."""

from __future__ import annotations

import re
from typing import Any

from .base import Dialect, error_number, error_type

# "maximum context length is 8192 tokens": the window; "your messages resulted in
# 9000 tokens" (Chat Completions) / "you requested 9000 tokens": the request's size.
_WINDOW = re.compile(r"maximum context length is (\d+) tokens")
_SIZE = re.compile(r"(?:resulted in|requested) (\d+) tokens")


class OpenAIVendor(Dialect):
    """A provider API served by OpenAI (``CONTEXTSVC_UPSTREAM_OPENAI_*``)."""

    provider = "openai"
    vendor = "OpenAI"
    path_prefix = "/proxy/openai/"
    url_setting = "CONTEXTSVC_UPSTREAM_OPENAI_URL"
    key_setting = "CONTEXTSVC_UPSTREAM_OPENAI_API_KEY"
    too_large_kind = "context_length_exceeded"

    def error_body(self, status: int, message: str, kind: str | None = None) -> dict[str, Any]:
        kind = kind or error_type(status)
        code = "context_length_exceeded" if kind == "context_length_exceeded" else None
        if kind == "context_length_exceeded":
            kind = "invalid_request_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def is_overflow(self, status: int, body: Any) -> bool:
        if status not in (400, 413) or not isinstance(body, dict):
            return False
        error = body.get("error")
        if not isinstance(error, dict):
            return False
        return error.get("code") == "context_length_exceeded"

    def reported_window(self, body: Any) -> int | None:
        return error_number(body, _WINDOW)

    def reported_size(self, body: Any) -> int | None:
        return error_number(body, _SIZE)
