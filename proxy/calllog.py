"""The proxy's log line for a call: the session, the call's record, what the client got
and what upstream answered (docs/proxy.md#logs).

One line per forwarded call: INFO for an answer relayed, WARNING for an
upstream error relayed, an upstream that could not be reached and a call
refused for a missing server key. Those are answers of upstream's (or of the
setup's), not errors of ours: the line is marked as logged, so Django's request
logger does not report them again as our own (a relayed 500 as "Internal
Server Error", a 529 as "Unknown Status Code"). A 5xx of our own, a bug, is not
marked: Django logs it at ERROR, with the traceback logged where it was caught.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from django.http import HttpResponseBase

logger = logging.getLogger(__name__)

Answer = TypeVar("Answer", bound=HttpResponseBase)


def log_call(
    dialect: str,
    session: str | None,
    record: int | None,
    status: int | None,
    upstream: int | None,
    detail: str = "",
    level: int = logging.INFO,
) -> None:
    """``proxy anthropic: session=ses_1 call=42 status=529 upstream=529: upstream 529
    overloaded_error: Overloaded`` (``-`` for what the call does not have); the same
    fields as ``extra`` (``contextsvc_*``) for a structured handler."""
    logger.log(
        level,
        "proxy %s: session=%s call=%s status=%s upstream=%s%s",
        dialect,
        session or "-",
        record if record is not None else "-",
        status if status is not None else "-",
        upstream if upstream is not None else "-",
        f": {detail}" if detail else "",
        extra={
            "contextsvc_session": session,
            "contextsvc_call": record,
            "contextsvc_status": status,
            "contextsvc_upstream_status": upstream,
        },
    )


def upstream_error(status: int, payload: Any, raw: bytes) -> str:
    """``upstream 529 overloaded_error: Overloaded``: upstream's status, error type and
    message, from either provider's error shape (the body's start when it has none)."""
    kind, message = error_fields(payload, raw)
    return f"upstream {status} {kind}: {message[:300]}" if message else f"upstream {status} {kind}"


def logged(response: Answer) -> Answer:
    """Django's request logger skips ``response``: our line has said what it is."""
    response._has_been_logged = True  # type: ignore[attr-defined]  # django.utils.log.log_response
    return response


def error_fields(payload: Any, raw: bytes) -> tuple[str, str]:
    """(type, message) of a provider's error body (Anthropic's or OpenAI's shape); for a body
    without that shape, ``error`` and the body's start."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        kind = str(error.get("type") or error.get("code") or "error")
        return kind, str(error.get("message") or "")
    return "error", raw[:200].decode(errors="replace")
