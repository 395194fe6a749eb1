"""The async HTTP client the proxy forwards with: one connection pool per event loop."""

from __future__ import annotations

import asyncio
import json as _json
import os
import weakref
from typing import Any

import httpx
import orjson
from django.conf import settings

_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


class Unreachable(Exception):
    """Upstream could not be reached (502) or did not answer in time (504)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _where(url: str | httpx.URL, setting: str) -> str:
    """``http://127.0.0.1:9 (CONTEXTSVC_UPSTREAM_ANTHROPIC_URL)``: the host an operator
    checks and the setting that chose it."""
    parsed = httpx.URL(str(url))
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    origin = f"{parsed.scheme}://{host}:{port}"
    return f"{origin} ({setting})" if setting else origin


def _reason(exc: BaseException) -> str:
    """The cause in words: the OS's ("connection refused", "name or service not known"),
    found under httpx's own ("All connection attempts failed"), else the exception's."""
    reason, seen = "", exc
    for _ in range(8):  # the chain is httpx's, httpcore's, anyio's, the socket's
        if isinstance(seen, OSError) and isinstance(seen.errno, int):
            reason = os.strerror(seen.errno) if seen.errno > 0 else str(seen.strerror or "")
        following = seen.__cause__ or seen.__context__
        if following is None:
            break
        seen = following
    reason = reason or str(exc) or type(exc).__name__
    return reason[:1].lower() + reason[1:]


def _timed_out(exc: httpx.TimeoutException, where: str, answer: str) -> Unreachable:
    if isinstance(exc, httpx.ConnectTimeout):
        seconds, setting = settings.CONTEXTSVC_UPSTREAM_CONNECT_TIMEOUT, "CONNECT"
        what = f"cannot reach the upstream {where}: no connection"
    else:
        seconds, setting = settings.CONTEXTSVC_UPSTREAM_READ_TIMEOUT, "READ"
        what = f"the upstream {where} did not {answer}"
    return Unreachable(
        504, f"contextsvc proxy: {what} within {seconds} s (CONTEXTSVC_UPSTREAM_{setting}_TIMEOUT)"
    )


def client() -> httpx.AsyncClient:
    """This loop's client: connections belong to the loop that opened them."""
    loop = asyncio.get_running_loop()
    current = _CLIENTS.get(loop)
    if current is None or current.is_closed:
        timeout = httpx.Timeout(
            settings.CONTEXTSVC_UPSTREAM_READ_TIMEOUT,
            connect=settings.CONTEXTSVC_UPSTREAM_CONNECT_TIMEOUT,
        )
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        current = httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False)
        _CLIENTS[loop] = current
    return current


async def open_call(
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    json: Any = None,
    content: bytes | None = None,
    setting: str = "",
) -> httpx.Response:
    """Send a request and return as soon as the status and headers are in (the body streams).

    The body: ``json`` written here, or ``content``, JSON written already.
    ``setting``: the one that chose ``url`` (``Dialect.upstream_setting``), named in the
    ``Unreachable`` message with the host.
    """
    http = client()
    if json is None and content is None:
        request = http.build_request(method, url, headers=headers)
    else:
        content = encode_json(json) if content is None else content
        headers = {**headers, "content-type": "application/json"}
        request = http.build_request(method, url, headers=headers, content=content)
    try:
        return await http.send(request, stream=True)
    except httpx.TimeoutException as exc:
        raise _timed_out(exc, _where(url, setting), "answer") from exc
    except httpx.ConnectError as exc:
        where = _where(url, setting)
        message = f"contextsvc proxy: cannot reach the upstream {where}: {_reason(exc)}"
        raise Unreachable(502, message) from exc
    except httpx.HTTPError as exc:
        where = _where(url, setting)
        message = (
            f"contextsvc proxy: the upstream {where} failed: {_reason(exc)} ({type(exc).__name__})"
        )
        raise Unreachable(502, message) from exc


def encode_json(value: Any) -> bytes:
    """The body's JSON as httpx would write it (compact, UTF-8), by orjson: a managed context
    of 2,000 messages in a millisecond. The stdlib's for what orjson cannot write."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return _json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


async def read_body(response: httpx.Response, *, setting: str = "") -> bytes:
    """The whole body of a response opened by ``open_call`` (closed afterwards)."""
    try:
        return await response.aread()
    except httpx.TimeoutException as exc:
        raise _timed_out(exc, _where(response.request.url, setting), "finish its answer") from exc
    except httpx.HTTPError as exc:
        where = _where(response.request.url, setting)
        message = f"contextsvc proxy: the upstream {where} broke off its answer: {_reason(exc)}"
        raise Unreachable(502, message) from exc
    finally:
        await response.aclose()
