"""The synchronous client: :class:`Client` (sessions) and :class:`Session` (one conversation).

The operations themselves are in ``_ops`` (shared with the async client); this
module only sends a call, blocking, and sleeps between attempts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from ._core import (
    DEFAULT_TIMEOUT,
    Call,
    Json,
    Outcome,
    RetryPolicy,
    final_answer,
    http_options,
    retry_wait,
)
from ._ops import ClientOps, SessionOps


class Session(SessionOps["Client", Json, None]):
    __doc__ = SessionOps.__doc__


class Client(ClientOps[Json, None, Session, Session]):
    """A connection to the service with one agent key.

    ``Client("http://127.0.0.1:8000", "cx_…")``; use as a context manager or
    call :meth:`close`. ``http_client`` lets you bring your own
    ``httpx.Client`` (its base URL and headers are then yours to set); ``transport`` an httpx
    transport under the client's own.
    """

    _session_class = Session

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        options = http_options(base_url, api_key, headers, timeout, transport)
        self._http = http_client or httpx.Client(**options)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call) -> Any:
        """Send ``call`` with the retry policy; the parsed JSON answer, or a typed error."""
        attempt = 0
        while True:
            outcome: Outcome
            try:
                outcome = self._http.request(call.method, call.path, **call.request_kwargs())
            except httpx.TransportError as exc:
                outcome = exc
            wait = retry_wait(self.retry, call, attempt, outcome)
            if wait is None:
                return final_answer(call, outcome)
            time.sleep(wait)
            attempt += 1

    def _run(self, call: Call, parse: Callable[[Any], Any]) -> Any:
        return parse(self.send(call))
