"""The asynchronous client: :class:`AsyncClient` and :class:`AsyncSession`, the same calls as the sync ones.

The operations themselves are in ``_ops`` (shared with the sync client); this
module only sends a call, awaited, and sleeps between attempts without
blocking the loop. Every operation returns a coroutine to await.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
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


# Each operation returns a coroutine of what the sync client's returns.
class AsyncSession(SessionOps["AsyncClient", Coroutine[Any, Any, Json], Coroutine[Any, Any, None]]):
    __doc__ = SessionOps.__doc__


class AsyncClient(
    ClientOps[
        Coroutine[Any, Any, Json],
        Coroutine[Any, Any, None],
        Coroutine[Any, Any, AsyncSession],
        AsyncSession,
    ]
):
    """A connection to the service with one agent key, for asyncio.

    ``AsyncClient("http://127.0.0.1:8000", "cx_…")``; use as an async context
    manager or call :meth:`aclose`. ``http_client`` lets you bring your own
    ``httpx.AsyncClient`` (its base URL and headers are then yours to set); ``transport`` an httpx
    transport under the client's own.
    """

    _session_class = AsyncSession

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        options = http_options(base_url, api_key, headers, timeout, transport)
        self._http = http_client or httpx.AsyncClient(**options)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call) -> Any:
        """Send ``call`` with the retry policy; the parsed JSON answer, or a typed error."""
        attempt = 0
        while True:
            outcome: Outcome
            try:
                outcome = await self._http.request(call.method, call.path, **call.request_kwargs())
            except httpx.TransportError as exc:
                outcome = exc
            wait = retry_wait(self.retry, call, attempt, outcome)
            if wait is None:
                return final_answer(call, outcome)
            await asyncio.sleep(wait)
            attempt += 1

    async def _run(self, call: Call, parse: Callable[[Any], Any]) -> Any:
        return parse(await self.send(call))
