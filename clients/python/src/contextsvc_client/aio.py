"""The asynchronous client: :class:`AsyncClient` and :class:`AsyncSession`, the same calls as the sync ones."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ._core import (
    DEFAULT_TIMEOUT,
    RETRY_STATUSES,
    Call,
    ContextFormat,
    Json,
    MessageFormat,
    RetryPolicy,
    UploadData,
    api_base,
    append_call,
    auth_headers,
    budget_call,
    compact_call,
    context_call,
    create_session_call,
    delete_session_call,
    get_session_call,
    grep_ref_call,
    list_sessions_call,
    may_retry,
    read_ref_call,
    retract_call,
    set_system_call,
    set_tools_call,
    snapshot_call,
    upload_output_call,
    usage_call,
    usage_fields,
)
from .errors import ConnectionFailedError, error_from_response


class AsyncClient:
    """A connection to the service with one agent key.

    ``AsyncClient("http://127.0.0.1:8000", "cx_…")``; use as an async context
    manager or call :meth:`aclose`. ``http_client`` lets you bring your own
    ``httpx.AsyncClient`` (its base URL and headers are then yours to set); ``transport`` an httpx
    transport under the client's own.
    """

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
        self._http = http_client or httpx.AsyncClient(
            base_url=api_base(base_url),
            headers=auth_headers(api_key, headers),
            timeout=timeout,
            transport=transport,
        )

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
            try:
                response = await self._http.request(call.method, call.path, **call.request_kwargs())
            except httpx.TransportError as exc:
                if (
                    not call.retryable
                    or attempt >= self.retry.max_retries
                    or not may_retry(call, exc)
                ):
                    raise ConnectionFailedError(f"{call.method} {call.path}: {exc!r}") from exc
                await asyncio.sleep(self.retry.delay(attempt))
                attempt += 1
                continue
            status = response.status_code
            if status in RETRY_STATUSES and call.retryable and attempt < self.retry.max_retries:
                await asyncio.sleep(self.retry.delay(attempt, response))
                attempt += 1
                continue
            if status >= 400:
                raise error_from_response(response)
            return response.json() if call.returns_json and status != 204 else None

    # --- sessions -------------------------------------------------------------------

    async def create_session(
        self,
        model: str,
        *,
        id: str | None = None,  # noqa: A002 - the API's name
        agent: str | None = None,
        provider: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        buffer_tokens: int | None = None,
        tokenizer: str | None = None,
        policy: Mapping[str, Any] | None = None,
    ) -> AsyncSession:
        """A new session (``POST /sessions``); the service picks the id unless you do."""
        fields = {
            "model": model,
            "id": id,
            "agent": agent,
            "provider": provider,
            "context_window": context_window,
            "max_output_tokens": max_output_tokens,
            "buffer_tokens": buffer_tokens,
            "tokenizer": tokenizer,
            "policy": policy,
        }
        data = await self.send(create_session_call(fields))
        return AsyncSession(self, data["id"], data)

    async def get_session(self, sid: str) -> AsyncSession:
        """An existing session, its state loaded (``NotFoundError`` when there is none)."""
        return AsyncSession(self, sid, await self.send(get_session_call(sid)))

    def session(self, sid: str) -> AsyncSession:
        """The object for session ``sid`` without a request (for a session you know exists)."""
        return AsyncSession(self, sid)

    async def list_sessions(
        self,
        *,
        agent: str | None = None,
        status: str | None = None,
        cursor: int | None = None,
        limit: int = 50,
    ) -> Json:
        params = {"agent": agent, "status": status, "cursor": cursor, "limit": limit}
        return await self.send(list_sessions_call(params))

    async def delete_session(self, sid: str) -> None:
        """Delete the session with its transcript, outputs and snapshots."""
        await self.send(delete_session_call(sid))

    # --- stored tool outputs (not bound to a session) -------------------------------------

    async def read_ref(
        self, ref: str, *, offset: int = 1, limit: int = 100, max_line_length: int | None = None
    ) -> Json:
        """Lines ``offset``… (1-based) of a stored output: ``text``, ``total_lines``, ``has_more``."""
        return await self.send(
            read_ref_call(ref, offset=offset, limit=limit, max_line_length=max_line_length)
        )

    async def grep_ref(
        self,
        ref: str,
        pattern: str,
        *,
        context: int = 0,
        max_matches: int = 100,
        ignore_case: bool = False,
        start_line: int = 1,
    ) -> Json:
        """Lines of a stored output matching ``pattern`` (a regex), with ``context`` lines around."""
        return await self.send(
            grep_ref_call(
                ref,
                pattern,
                context=context,
                max_matches=max_matches,
                ignore_case=ignore_case,
                start_line=start_line,
            )
        )


class AsyncSession:
    """One session of the service: post what happens, ask what to send next.

    ``data`` holds the session's JSON as last loaded (``refresh()`` reloads it).
    """

    def __init__(self, client: AsyncClient, sid: str, data: Json | None = None) -> None:
        self.client = client
        self.id = sid
        self.data: Json = data or {}

    def __repr__(self) -> str:
        return f"AsyncSession({self.id!r})"

    async def refresh(self) -> Json:
        self.data = await self.client.send(get_session_call(self.id))
        return self.data

    async def delete(self) -> None:
        await self.client.delete_session(self.id)

    async def set_system(self, sections: Sequence[Mapping[str, Any]]) -> Json:
        """The system prompt as sections ``[{name, content, cacheable?, kind?}]``."""
        return await self.client.send(set_system_call(self.id, sections))

    async def set_tools(self, tools: Sequence[Mapping[str, Any]]) -> Json:
        """The tools offered to the model ``[{name, description, input_schema, category?}]``."""
        return await self.client.send(set_tools_call(self.id, tools))

    async def append(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        format: MessageFormat | None = None,  # noqa: A002 - the API's name
        idempotency_key: str | None = None,
    ) -> Json:
        """Post messages (the service's shape, or a provider's with ``format``).

        Every call carries an Idempotency-Key (a fresh one unless given), so
        its retries are stored once. Returns per message ``seq``, ``token_count``,
        ``view`` …, and the new ``budget``.
        """
        call = append_call(self.id, messages, format=format, idempotency_key=idempotency_key)
        return await self.client.send(call)

    async def retract(
        self,
        *,
        last: int | None = None,
        from_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> Json:
        """Take the last ``last`` live messages (or those from ``from_seq`` on) out of the window."""
        call = retract_call(self.id, last=last, from_seq=from_seq, idempotency_key=idempotency_key)
        return await self.client.send(call)

    async def context(self, format: ContextFormat = "anthropic", *, extra_tokens: int = 0) -> Json:  # noqa: A002
        """The request body to send next, with its ``budget`` (remove that key before sending)."""
        return await self.client.send(
            context_call(self.id, format=format, extra_tokens=extra_tokens)
        )

    async def budget(self, *, extra_tokens: int = 0) -> Json:
        return await self.client.send(budget_call(self.id, extra_tokens=extra_tokens))

    async def usage(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        *,
        cache_creation_tokens: int = 0,
        cache_read_tokens: int = 0,
        through_seq: int | None = None,
    ) -> Json:
        """Report what the provider counted for the last call."""
        fields = usage_fields(
            input_tokens, output_tokens, cache_creation_tokens, cache_read_tokens, through_seq
        )
        return await self.client.send(usage_call(self.id, fields))

    async def compact(
        self,
        *,
        strategy: str | None = None,
        instructions: str | None = None,
        retain_last_turns: int | None = None,
        wait: bool = False,
    ) -> Json:
        """Request a compaction; ``wait=True`` runs it in the request and returns its result."""
        fields = {
            "strategy": strategy,
            "instructions": instructions,
            "retain_last_turns": retain_last_turns,
            "wait": wait,
        }
        return await self.client.send(compact_call(self.id, fields))

    async def snapshot(self) -> Json:
        """Resume data: the newest snapshot and the messages after it."""
        return await self.client.send(snapshot_call(self.id))

    async def upload_output(self, data: UploadData, *, tool_name: str = "") -> Json:
        """Store a large tool output; a tool message then carries its ``ref`` as ``output_ref``.

        ``data``: bytes or text (retried like any call), or a binary file or
        an iterable of byte chunks (an async iterable for the async client),
        streamed as read and so sent once.
        """
        return await self.client.send(upload_output_call(self.id, data, tool_name=tool_name))

    async def read_ref(
        self, ref: str, *, offset: int = 1, limit: int = 100, max_line_length: int | None = None
    ) -> Json:
        return await self.client.read_ref(
            ref, offset=offset, limit=limit, max_line_length=max_line_length
        )

    async def grep_ref(
        self,
        ref: str,
        pattern: str,
        *,
        context: int = 0,
        max_matches: int = 100,
        ignore_case: bool = False,
        start_line: int = 1,
    ) -> Json:
        return await self.client.grep_ref(
            ref,
            pattern,
            context=context,
            max_matches=max_matches,
            ignore_case=ignore_case,
            start_line=start_line,
        )
