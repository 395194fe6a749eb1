"""The proxy's Gemini routes: ``/proxy/gemini/v1beta/models/{model}:{method}`` and the model list.

``generateContent`` and ``streamGenerateContent`` go through the managed
context as the other APIs' calls do (``views.proxy_call``); ``countTokens``
and ``GET models`` are relayed as they are, the caller's credentials checked
first. The key may come as ``?key=``: it is read as the ``x-goog-api-key``
header and leaves the query, so it goes upstream as a header (or is replaced
by the server's key under managed credentials) and is never logged in a URL.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl, urlencode

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from contextsvc.body_gate import BodyRefused

from . import gate
from .providers import GEMINI
from .providers.gemini import KEY_HEADER
from .views import pass_through, provider_error, proxy_call

logger = logging.getLogger(__name__)

_MANAGED = ("generateContent", "streamGenerateContent")


def _headers_and_query(request: HttpRequest) -> tuple[dict[str, str], str]:
    """The client's headers (lower-cased names) with a ``?key=`` as ``x-goog-api-key``,
    and the query without it."""
    headers = {name.lower(): value for name, value in request.headers.items()}
    pairs = parse_qsl(request.META.get("QUERY_STRING", ""), keep_blank_values=True)
    key = next((value for name, value in pairs if name == "key"), None)
    if key and not headers.get(KEY_HEADER):
        headers[KEY_HEADER] = key
    return headers, urlencode([(name, value) for name, value in pairs if name != "key"])


@csrf_exempt
@gate.body_released
async def gemini_model_call(
    request: HttpRequest, target: str
) -> HttpResponse | StreamingHttpResponse:
    """``{model}:{method}``: a managed call, a token count passed through, or a 404."""
    model, _, method = target.partition(":")
    path = f"models/{target}"
    try:
        headers, query = _headers_and_query(request)
        if not model or (method not in _MANAGED and method != "countTokens"):
            return provider_error(GEMINI, 404, f"Not found: {request.path}")
        if method == "countTokens":
            return await _count_tokens(request, path, headers, query)
        return await proxy_call(
            request, GEMINI, path, headers=headers, route={"model": model}, query=query
        )
    except Exception:
        logger.exception("proxy: gemini call failed")
        return provider_error(GEMINI, 500, "contextsvc proxy: internal error (logged)")


async def _count_tokens(
    request: HttpRequest, path: str, headers: dict[str, str], query: str
) -> HttpResponse:
    """Relayed as sent: the count is of the client's body, not the managed context."""
    if request.method != "POST":
        return provider_error(GEMINI, 405, f"Method {request.method} not allowed")
    try:
        body = gate.read_json(request)
    except BodyRefused as exc:
        return gate.refusal(GEMINI, exc)
    return await pass_through(request, GEMINI, path, headers=headers, query=query, body=body)


async def gemini_models(request: HttpRequest) -> HttpResponse:
    headers, query = _headers_and_query(request)
    return await pass_through(request, GEMINI, "models", headers=headers, query=query)
