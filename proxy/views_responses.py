"""The Responses API routes: ``POST /responses`` (managed context), and the proxy as the store.

``POST /proxy/openai/v1/responses`` goes the way of the other dialects
(``views.proxy_call``) with the Responses session rules
(``services.responses``); ``GET`` / ``DELETE /responses/{id}`` answer from
the proxy's own store. Every refusal is in OpenAI's error shape.
"""

from __future__ import annotations

import logging

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from contextsvc.errors import ServiceError

from .providers import RESPONSES
from .services.calls import caller_for
from .services.responses import prepare_responses
from .services.store import stored_response_delete, stored_response_get
from .views import _STATUS, provider_error, proxy_call

logger = logging.getLogger(__name__)


@csrf_exempt
async def responses_create(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    try:
        return await proxy_call(request, RESPONSES, "responses", prepare_fn=prepare_responses)
    except Exception:
        logger.exception("proxy: responses call failed")
        return provider_error(RESPONSES, 500, "contextsvc proxy: internal error (logged)")


def _stored(headers, response_id: str, delete: bool) -> dict:
    caller = caller_for(RESPONSES, headers)
    if delete:
        stored_response_delete(owner=caller.key, response_id=response_id)
        return {"id": response_id, "object": "response", "deleted": True}
    return stored_response_get(owner=caller.key, response_id=response_id).response


@csrf_exempt
async def responses_item(request: HttpRequest, response_id: str) -> HttpResponse:
    """``GET`` a stored response, or ``DELETE`` it."""
    if request.method not in ("GET", "DELETE"):
        return provider_error(RESPONSES, 405, f"Method {request.method} not allowed")
    try:
        body = await sync_to_async(_stored)(
            request.headers, response_id, request.method == "DELETE"
        )
    except ServiceError as exc:
        return provider_error(RESPONSES, _STATUS.get(exc.status, 400), exc.message)
    return JsonResponse(body)
