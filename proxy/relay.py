"""Forwarding one prepared call upstream and relaying the answer, streamed or whole.

A stream is relayed chunk by chunk as it arrives (never buffered whole) while
an ``SseParser`` and the provider's accumulator read the same bytes; when it
ends — or the client goes away — what arrived is stored (marked incomplete
when the stream did not finish) with its usage.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from asgiref.sync import sync_to_async
from django.http import HttpResponse, StreamingHttpResponse

from contextsvc.engine.providers.common import ConversionError
from contextsvc.engine.providers.sse import SseParser

from .calllog import error_fields, log_call, logged, upstream_error
from .closing import record_closing, write_record
from .outcome import Watch, outcome_record
from .providers import Dialect, relayed_headers
from .services.builtins import max_rounds, without_builtins
from .services.calls import Prepared, rebuild, rebuild_after_overflow
from .services.reply import session_record_reply
from .services.store import stored_response_add
from .upstream import Unreachable, open_call, read_body
from .upstream_json import SENT

logger = logging.getLogger(__name__)

GUARD_HEADER = "X-Contextsvc-Guard"
SESSION_HEADER = "X-Contextsvc-Session"


@dataclass(slots=True)
class Call:
    """What forwarding needs: the provider, the upstream path and headers, the prepared body."""

    dialect: Dialect
    path: str
    headers: dict[str, str]
    prepared: Prepared
    converted: Any  # the client's request, converted (for a rebuild after an overflow)
    strip_usage: bool = False  # the usage chunk was the proxy's ask, not the client's
    started_ns: int = 0  # when the current upstream round began (the call's span starts there)
    record_id: int | None = None  # the last build's record (``ContextCall``), once written
    watch: Watch = field(default_factory=Watch)  # the upstream call's outcome (``outcome``)
    received: float = 0.0  # perf_counter() when the view took the call (its body read)
    timing: str = ""  # the answer's Server-Timing, from the first upstream request

    def log(
        self, status: int | None, upstream: int | None, detail: str = "", level: int = 20
    ) -> None:
        """The call's log line (``calllog``; ``level`` 20 is INFO, 30 WARNING)."""
        session = self.prepared.session.external_id
        log_call(self.dialect.name, session, self.record_id, status, upstream, detail, level)

    async def end(
        self,
        status: int | None,
        upstream: int | None,
        detail: str = "",
        level: int = 20,
        **how: Any,
    ) -> None:
        """Log the call and record its outcome (``how``: ``cut``, ``streamed``; ``Watch.values``)."""
        self.log(status, upstream, detail, level)
        values = self.watch.values(client=status, upstream=upstream, **how)
        await outcome_record(self.record_id, self.prepared.session.pk, values)

    async def round_done(self, upstream: int, *, streamed: bool = False) -> None:
        """A round of built-in calls answered by the proxy: its record gets upstream's
        outcome (the client saw no status of its own for it)."""
        values = self.watch.values(client=None, upstream=upstream, streamed=streamed)
        await outcome_record(self.record_id, self.prepared.session.pk, values)


def json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _ours(response: HttpResponse | StreamingHttpResponse, prepared: Prepared, timing: str) -> None:
    response[SESSION_HEADER] = prepared.session.external_id
    response[GUARD_HEADER] = prepared.guard
    if timing:  # ours first, then upstream's own metrics when it sent any
        theirs = response.get("Server-Timing")
        response["Server-Timing"] = f"{timing}, {theirs}" if theirs else timing


def server_timing(proxy: float, upstream: float) -> str:
    """``Server-Timing`` (W3C): the proxy's own time before it forwarded (gate, sync,
    build), apart from upstream's until its headers; seconds in, milliseconds out."""
    return (
        f'proxy;dur={proxy * 1000:.1f};desc="contextsvc: check, sync, build", '
        f'upstream;dur={upstream * 1000:.1f};desc="upstream: until its headers"'
    )


async def record_build(call: Call) -> None:
    """Write the record of the build just forwarded (``Prepared.record``), once.

    Run when upstream has answered: after the first chunk of a stream is
    relayed, before anything else of an answer or an error, and before the
    reply is stored (which completes the record with its usage).
    """
    record, call.prepared.record = call.prepared.record, None
    if record is not None:
        session = call.prepared.session.external_id
        call.record_id = await sync_to_async(write_record)(record, session)


async def forward(call: Call) -> HttpResponse | StreamingHttpResponse:
    """Upstream calls for one client call.

    An overflow ("prompt is too long") compacts and retries once; an answer
    that only calls built-in tools is answered by the proxy and upstream is
    asked again (``services.builtins``), up to ``policy.proxy.max_builtin_rounds``
    rounds in all; the last is sent without the built-in tools.
    """
    dialect = call.dialect
    url, setting = dialect.upstream_url(call.path), dialect.upstream_setting()
    streaming = dialect.streams(call.prepared.body, call.path)
    overflowed, rounds = False, 0
    limit = max_rounds(call.prepared.session)
    while True:
        body = _upstream_body(call, streaming, last=rounds + 1 >= limit)
        call.started_ns = time.time_ns()
        call.watch.start()
        sent = time.perf_counter()
        response = await open_call("POST", url, headers=call.headers, content=body, setting=setting)
        if not call.timing and call.received:
            call.timing = server_timing(sent - call.received, time.perf_counter() - sent)
        if not streaming:
            call.watch.first()
        if not streaming or response.status_code >= 300:
            await record_build(call)  # a stream's: once its first chunk is relayed
        if response.status_code >= 300:
            raw = await read_body(response, setting=setting)
            payload = json_or_none(raw)
            call.watch.first()
            call.watch.error(*error_fields(payload, raw))
            if not overflowed and dialect.is_overflow(response.status_code, payload):
                overflowed = True
                await call.end(None, response.status_code, "overflow: compacted, asked again", 30)
                call.watch.retries = 1
                call.prepared = await sync_to_async(rebuild_after_overflow)(
                    prepared=call.prepared, dialect=dialect, converted=call.converted, error=payload
                )
                continue
            status = response.status_code
            await call.end(status, status, upstream_error(status, payload, raw), logging.WARNING)
            return logged(_answer(response, raw, call.prepared, call.timing))
        if streaming:
            return _stream_response(response, call)
        raw = await read_body(response, setting=setting)
        payload = json_or_none(raw)
        try:
            reply = dialect.reply_from_response(payload if isinstance(payload, dict) else {})
        except ConversionError:
            status = response.status_code
            call.watch.error("not_understood", "upstream answer not understood")
            await call.end(status, status, "upstream answer not understood", logging.WARNING)
            return _answer(response, raw, call.prepared, call.timing)
        rounds += 1
        recorded = await sync_to_async(session_record_reply)(
            session=call.prepared.session,
            dialect=dialect,
            reply=reply,
            response=payload,
            runnable=call.prepared.runnable,
            last_round=rounds >= limit,
            final_tool=call.prepared.final_tool,
            started_ns=call.started_ns,
            synced=call.prepared.synced,
        )
        if recorded.again:
            await call.round_done(response.status_code)
            call.prepared = await sync_to_async(rebuild)(
                prepared=call.prepared, dialect=dialect, converted=call.converted
            )
            continue
        if recorded.shown is not payload:
            raw = json.dumps(recorded.shown).encode()
        await _store(call, recorded.shown)
        await call.end(response.status_code, response.status_code)
        return _answer(response, raw, call.prepared, call.timing)


def _upstream_body(call: Call, streaming: bool, *, last: bool = False) -> bytes:
    """The body to send, as JSON; on the last allowed round, without the built-in tools
    (the model answers, or calls the client's tools, rather than loop on)."""
    body = call.prepared.body
    if last:
        body = without_builtins(body, call.prepared.runnable)
    if streaming:
        body, asked = call.dialect.streaming_body(body)
        call.strip_usage = call.strip_usage or asked
    session = call.prepared.session
    return SENT.encode(body, call.dialect.messages_key, (session.pk, session.external_id))


async def _store(call: Call, response: Any) -> None:
    """A Responses answer goes into the proxy's store (``services.store``)."""
    if not call.dialect.stores_responses or not isinstance(response, dict):
        return
    stored = call.converted.rest.get("store", True) is not False
    await sync_to_async(stored_response_add)(
        session=call.prepared.session, response=response, stored=stored
    )


def _answer(response: httpx.Response, raw: bytes, prepared: Prepared, timing: str) -> HttpResponse:
    """Upstream's answer or error, whole, with its headers (less the hop's) and ours."""
    content_type = response.headers.get("content-type", "application/json")
    out = HttpResponse(raw, status=response.status_code, content_type=content_type)
    for name, value in relayed_headers(response.headers).items():
        out[name] = value
    _ours(out, prepared, timing)
    return out


def _stream_response(response: httpx.Response, call: Call) -> StreamingHttpResponse:
    out = StreamingHttpResponse(
        _relay(response, call),
        status=response.status_code,
        content_type=response.headers.get("content-type", "text/event-stream"),
    )
    for name, value in relayed_headers(response.headers).items():
        out[name] = value
    out["Cache-Control"] = "no-cache"
    out["X-Accel-Buffering"] = "no"  # a proxy in front must not buffer the stream either
    _ours(out, call.prepared, call.timing)
    return out


async def _relay(response: httpx.Response, call: Call) -> AsyncIterator[bytes]:
    """The client's stream: upstream's, or several rounds of it when built-ins are answered."""
    dialect, converted = call.dialect, call.converted
    relay = dialect.stream_filter(
        call.prepared.runnable, call.prepared.final_tool, strip_usage=call.strip_usage
    )
    rounds, stored = 0, False
    limit = max_rounds(call.prepared.session)
    accumulator = dialect.stream()
    try:
        while True:
            parser, accumulator, stored = SseParser(), dialect.stream(), False
            broken = ""
            try:
                async for chunk in response.aiter_raw():
                    call.watch.first()
                    events = parser.feed(chunk)
                    out = []
                    for event in events:
                        call.watch.see(event, final=dialect.ends_stream(event))
                        accumulator.feed(event)
                        if relay is not None:
                            out.append(relay.feed(event))
                    if relay is None:
                        yield chunk
                    elif any(out):
                        yield b"".join(out)
                    if call.prepared.record is not None:
                        await record_build(call)
                for event in parser.close():
                    call.watch.see(event, final=dialect.ends_stream(event))
                    accumulator.feed(event)
                    if relay is not None:
                        yield relay.feed(event)
            except httpx.HTTPError as exc:
                broken = f"upstream broke off the stream: {type(exc).__name__}"
            finally:
                await response.aclose()
            rounds += 1
            reply = accumulator.result()
            await record_build(call)  # a stream that relayed nothing
            recorded = await sync_to_async(session_record_reply)(
                session=call.prepared.session,
                dialect=dialect,
                reply=reply,
                response=_final_response(accumulator),
                runnable=call.prepared.runnable,
                last_round=rounds >= limit or reply.incomplete,
                final_tool=call.prepared.final_tool,
                started_ns=call.started_ns,
                synced=call.prepared.synced,
            )
            stored = True
            tail = (
                relay.end_round(again=False, note=recorded.note)
                if relay is not None and not recorded.again
                else b""
            )
            if not recorded.again:
                # the response as the client saw it (a filter made several rounds one)
                final = getattr(relay, "final", None) or _final_response(accumulator)
                await _store(call, final)
                cut = not call.watch.ended
                ended = broken or ("stream incomplete" if reply.incomplete else "stream ended")
                if cut:
                    ended = f"{ended}: stream cut after {call.watch.events} events"
                    call.watch.error_type = call.watch.error_type or "stream_cut"
                    call.watch.error_message = call.watch.error_message or ended
                await call.end(
                    200,
                    response.status_code,
                    ended,
                    logging.WARNING if cut or broken else logging.INFO,
                    cut=cut,
                    streamed=True,
                )
            if relay is None:
                return
            if not recorded.again:
                yield tail
                return
            relay.end_round(again=True)
            await call.round_done(response.status_code, streamed=True)
            call.prepared = await sync_to_async(rebuild)(
                prepared=call.prepared, dialect=dialect, converted=converted
            )
            call.started_ns = time.time_ns()
            call.watch.start()
            response = await open_call(
                "POST",
                dialect.upstream_url(call.path),
                headers=call.headers,
                content=_upstream_body(call, True, last=rounds + 1 >= limit),
                setting=dialect.upstream_setting(),
            )
            if response.status_code >= 300:
                await record_build(call)
                raw = await read_body(response, setting=dialect.upstream_setting())
                payload = json_or_none(raw) or {}
                said = upstream_error(response.status_code, payload, raw)
                call.watch.error(*error_fields(payload, raw))
                await call.end(200, response.status_code, said, logging.WARNING, streamed=True)
                error = payload.get("error") if isinstance(payload, dict) else None
                yield dialect.error_event(error or {"message": raw.decode(errors="replace")})
                return
    except Unreachable as exc:
        await record_build(call)
        call.watch.error("unreachable", exc.message)
        await call.end(200, None, exc.message, logging.WARNING, streamed=True)
        yield dialect.error_event({"type": "api_error", "message": exc.message})
    finally:
        pending, call.prepared.record = call.prepared.record, None
        if not stored:
            call.log(200, response.status_code, "the stream ended early: what arrived is stored")
            # docs/proxy.md#failed-calls: the client went away; not the model's failure.
            closed = call.watch.values(
                client=200, upstream=response.status_code, cut=not call.watch.ended, streamed=True
            )
            closed.update(
                error_type=closed["error_type"] or "client_closed",
                error_message=closed["error_message"]
                or f"the client closed the stream after {call.watch.events} events",
                failed=bool(call.watch.error_type) or response.status_code >= 300,
            )
            # A client disconnect cancels the relay: store what arrived, whatever
            # happens to this task (a thread of its own, not the request's).
            record = asyncio.ensure_future(
                sync_to_async(record_closing, thread_sensitive=False)(
                    call.prepared.session,
                    dialect,
                    accumulator.result(),
                    call.prepared.final_tool,
                    call.started_ns,
                    pending,
                    (call.record_id, closed),
                )
            )
            try:
                await response.aclose()
                await asyncio.shield(record)
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the record goes on
                pass


def _final_response(accumulator: Any) -> dict[str, Any] | None:
    """A Responses stream's final ``response`` object (the other dialects have none to give)."""
    response = getattr(accumulator, "response", None)
    return response if accumulator.done and isinstance(response, dict) else None
