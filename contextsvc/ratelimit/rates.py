"""The 429 a limit raises, and the rates' notation."""

from __future__ import annotations

from typing import Any

import limits

from contextsvc.errors import ServiceError


class RateLimited(ServiceError):
    code, status = "RATE_LIMITED", 429

    def __init__(self, message: str, *, retry_after: int, details: dict[str, Any]) -> None:
        super().__init__(message, details={**details, "retry_after": retry_after})
        self.retry_after = retry_after


# Nobody can tell when one of a key's running requests will end: ask for a second.
CONCURRENCY_RETRY_AFTER = 1


def too_many_at_once(limit: str, why: str) -> RateLimited:
    """The 429 of a concurrency limit (``limit``), saying ``why``."""
    return RateLimited(
        f"Too many concurrent requests: {why}; retry in {CONCURRENCY_RETRY_AFTER} s",
        retry_after=CONCURRENCY_RETRY_AFTER,
        details={"limit": limit, "scope": "concurrency"},
    )


def parse_rates(rates: str) -> list[limits.RateLimitItem]:
    """``"50/second;1500/minute"`` as limit items; "", "off" or "0" means none."""
    text = (rates or "").strip().lower()
    if text in ("", "off", "none", "0"):
        return []
    return limits.parse_many(text)
