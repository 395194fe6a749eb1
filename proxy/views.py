"""The proxy's async views: Anthropic Messages and Chat Completions with the managed context.

Served under ASGI (``contextsvc.asgi``, uvicorn workers): a stream holds no
thread while it waits on upstream. The database work runs through
``sync_to_async``. Every refusal is in the provider's own error shape, so the
client's SDK raises its usual exception; nothing answers with an HTML page.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from contextsvc.body_gate import BodyRefused
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.providers.common import ConversionError
from contextsvc.errors import ServiceError

from . import gate
from .calllog import log_call, logged, upstream_error
from .pooled import released
from .providers import ANTHROPIC, OPENAI, Dialect, relayed_headers, serving
from .relay import Call, forward, json_or_none, record_build
from .services.caller import NoUpstreamKey, caller_for
from .services.calls import ContextTooLarge, count_body, prepare
from .upstream import Unreachable, open_call, read_body

logger = logging.getLogger(__name__)

# contextsvc's own errors in the provider's terms (its SDK maps the status to an exception).
_STATUS = {401: 401, 403: 403, 404: 404, 409: 409, 413: 413, 422: 400, 429: 429, 503: 503}


def provider_error(dialect: Dialect, status: int, message: str) -> JsonResponse:
    return JsonResponse(dialect.error_body(status, message), status=status)


def conversion_error(dialect: Dialect, exc: ConversionError) -> JsonResponse:
    """A body the converter refused: a 400 naming the field (OpenAI's ``param`` too)."""
    return gate.refusal(dialect, BodyRefused(exc.message, exc.path or "body"))


def service_error(dialect: Dialect, exc: ServiceError) -> JsonResponse:
    """contextsvc's refusal in the provider's shape; over a rate limit, a 429 with ``retry-after``."""
    status = _STATUS.get(exc.status, 400)
    field = exc.details.get("field") if isinstance(exc.details, dict) else None
    if status == 400 and isinstance(field, str):
        response = gate.shaped(dialect, status, exc.message, field)
    else:
        response = provider_error(dialect, status, exc.message)
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        response["retry-after"] = str(retry_after)
    if isinstance(exc, NoUpstreamKey):
        # The SDKs and Claude Code read this before the status: no retry can help.
        response["x-should-retry"] = "false"
        log_call(dialect.name, None, None, status, None, exc.message, logging.WARNING)
        logged(response)  # a setup error, said once by our line
    return response


def upstream_path(request: HttpRequest, path: str, query: str | None) -> str:
    """``path`` with ``query``, or with the client's query when ``query`` is None."""
    if query is None:
        return _with_query(request, path)
    return f"{path}?{query}" if query else path


def _with_query(request: HttpRequest, path: str) -> str:
    """The upstream path with the client's query (Claude Code sends ``?beta=true``)."""
    query = request.META.get("QUERY_STRING")
    return f"{path}?{query}" if query else path


async def proxy_call(
    request: HttpRequest,
    dialect: Dialect,
    path: str,
    prepare_fn: Any = prepare,
    *,
    headers: Mapping[str, str] | None = None,
    route: dict[str, Any] | None = None,
    query: str | None = None,
) -> HttpResponse | StreamingHttpResponse:
    """Check, sync and build (``prepare_fn``: the dialect's), then forward (module doc).

    ``headers``: the client's as the dialect reads them (default the request's);
    ``route``: fields the URL gives (Gemini's model), put on the checked body;
    ``query``: upstream's query when not the client's (``upstream_path``)."""
    if request.method != "POST":
        return provider_error(dialect, 405, f"Method {request.method} not allowed")
    received = time.perf_counter()
    try:
        body = gate.read(request, dialect)
        if route:
            body = dialect.with_route(body, route)
        converted = dialect.envelope(body)
        gate.check_tools(body, converted)
    except BodyRefused as exc:
        return gate.refusal(dialect, exc)
    except ConversionError as exc:
        return conversion_error(dialect, exc)
    headers = request.headers if headers is None else headers
    try:
        caller, prepared = await sync_to_async(released(prepare_fn))(
            dialect=dialect,
            headers=headers,
            body=body,
            converted=converted,
        )
    except ContextTooLarge as exc:
        return JsonResponse(dialect.error_body(400, str(exc), dialect.too_large_kind), status=400)
    except ServiceError as exc:
        return service_error(dialect, exc)
    except ConversionError as exc:
        return conversion_error(dialect, exc)
    except BodyRefused as exc:  # a message of the new part of the history (``gate_fields``)
        return gate.refusal(dialect, exc)
    except EngineValidationError as exc:  # limits that cannot hold this call (its max_tokens)
        return provider_error(dialect, 400, str(exc))
    call = Call(
        dialect=dialect,
        path=upstream_path(request, path, query),
        headers=dialect.upstream_headers(headers, caller.upstream_key),
        prepared=prepared,
        converted=converted,
        received=received,
    )
    try:
        return await forward(call)
    except Unreachable as exc:
        await record_build(call)  # the build was made: it is recorded as for any answer
        call.watch.error("unreachable", exc.message)
        await call.end(exc.status, None, exc.message, logging.WARNING)
        response = provider_error(dialect, exc.status, exc.message)
        response["X-Contextsvc-Session"] = call.prepared.session.external_id
        return logged(response)  # upstream's failure, not a bug of ours: our line said it


async def _guarded(
    request: HttpRequest, dialect: Dialect, path: str
) -> HttpResponse | StreamingHttpResponse:
    """``proxy_call``, with anything unexpected answered in the provider's shape (and logged)."""
    try:
        return await proxy_call(request, dialect, path)
    except Exception:
        logger.exception("proxy: %s call failed", dialect.name)
        return provider_error(dialect, 500, "contextsvc proxy: internal error (logged)")


# What Anthropic's count_tokens takes of a Messages body.
_COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers")


async def _count_tokens(request: HttpRequest) -> HttpResponse:
    """Counts the body the proxy would send (the managed context), not the client's."""
    dialect = ANTHROPIC
    if request.method != "POST":
        return provider_error(dialect, 405, f"Method {request.method} not allowed")
    try:
        body = gate.read(request, dialect)
        converted = dialect.convert(body)
        caller, managed = await sync_to_async(count_body)(
            dialect=dialect, headers=request.headers, body=body, converted=converted
        )
    except BodyRefused as exc:
        return gate.refusal(dialect, exc)
    except ConversionError as exc:
        return conversion_error(dialect, exc)
    except ServiceError as exc:
        return service_error(dialect, exc)
    managed = {k: v for k, v in managed.items() if k in _COUNT_FIELDS}
    setting = dialect.upstream_setting()
    try:
        response = await open_call(
            "POST",
            dialect.upstream_url(_with_query(request, "messages/count_tokens")),
            headers=dialect.upstream_headers(request.headers, caller.upstream_key),
            json=managed,
            setting=setting,
        )
        raw = await read_body(response, setting=setting)
    except Unreachable as exc:
        return _unreachable(dialect, exc)
    return _relayed(dialect, response, raw)


def _unreachable(dialect: Dialect, exc: Unreachable) -> HttpResponse:
    """A side route's (count_tokens, models) unreachable upstream: our line, not Django's."""
    log_call(dialect.name, None, None, exc.status, None, exc.message, logging.WARNING)
    return logged(provider_error(dialect, exc.status, exc.message))


def _relayed(dialect: Dialect, response: Any, raw: bytes) -> HttpResponse:
    status = response.status_code
    out = HttpResponse(
        raw,
        status=status,
        content_type=response.headers.get("content-type", "application/json"),
    )
    for name, value in relayed_headers(response.headers).items():
        out[name] = value
    if status >= 400:  # upstream's error, relayed: said by our line (``calllog``)
        said = upstream_error(status, json_or_none(raw), raw)
        log_call(dialect.name, None, None, status, status, said, logging.WARNING)
        logged(out)
    return out


async def pass_through(
    request: HttpRequest,
    dialect: Dialect,
    path: str,
    *,
    headers: Mapping[str, str] | None = None,
    query: str | None = None,
    body: dict[str, Any] | None = None,
) -> HttpResponse:
    """A call relayed as it is (the model list; with ``body``, a POST), with the caller's
    credentials checked first (``headers``, ``query``: as for ``proxy_call``)."""
    headers = request.headers if headers is None else headers
    try:
        caller = await sync_to_async(caller_for)(dialect, headers)
    except ServiceError as exc:
        return service_error(dialect, exc)
    url = dialect.upstream_url(upstream_path(request, path, query))
    setting = dialect.upstream_setting()
    sent = dialect.upstream_headers(headers, caller.upstream_key)
    method = "GET" if body is None else "POST"
    try:
        response = await open_call(method, url, headers=sent, json=body, setting=setting)
        raw = await read_body(response, setting=setting)
    except Unreachable as exc:
        return _unreachable(dialect, exc)
    return _relayed(dialect, response, raw)


@csrf_exempt
@gate.body_released
async def anthropic_messages(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    return await _guarded(request, ANTHROPIC, "messages")


@csrf_exempt
@gate.body_released
async def openai_chat_completions(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    return await _guarded(request, OPENAI, "chat/completions")


@csrf_exempt
@gate.body_released
async def anthropic_count_tokens(request: HttpRequest) -> HttpResponse:
    try:
        return await _count_tokens(request)
    except Exception:
        logger.exception("proxy: count_tokens failed")
        return provider_error(ANTHROPIC, 500, "contextsvc proxy: internal error (logged)")


async def anthropic_models(request: HttpRequest) -> HttpResponse:
    return await pass_through(request, ANTHROPIC, "models")


async def openai_models(request: HttpRequest) -> HttpResponse:
    return await pass_through(request, OPENAI, "models")


async def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """An unknown path under /proxy/: a 404 in the shape of the provider the path names."""
    dialect = serving(request.path, ANTHROPIC)
    return provider_error(dialect, 404, f"Not found: {request.path}")
