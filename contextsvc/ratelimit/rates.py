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


def parse_rates(rates: str) -> list[limits.RateLimitItem]:
    """``"50/second;1500/minute"`` as limit items; "", "off" or "0" means none."""
    text = (rates or "").strip().lower()
    if text in ("", "off", "none", "0"):
        return []
    return limits.parse_many(text)
