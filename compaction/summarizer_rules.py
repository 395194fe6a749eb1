"""What every remote summariser shares: its time limit, its own retries, which failures are
transient (worth the task's retry with backoff) and which are not.

A module of its own so that ``summarizers`` (the SDK-backed ones and the choice of one) and
``summarizer_gemini`` (plain httpx) both follow the same rules without importing each other.
"""

from __future__ import annotations

DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 2
# 529 is Anthropic's "overloaded"; 408 / 409 are what the SDKs retry besides 429 and 5xx.
TRANSIENT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def is_transient(status: int) -> bool:
    """A status worth retrying later: rate limits, overload, any server error."""
    return status in TRANSIENT_STATUSES or status >= 500
