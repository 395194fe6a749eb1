"""The Responses API routes: ``POST /responses`` (managed context), compaction, the store.

``POST /proxy/openai/v1/responses`` goes the way of the other dialects
(``views.proxy_call``) with the Responses session rules
(``services.responses``), unless it asks for a compaction: then our own
compaction answers (``services.responses_compaction``), as it does
``POST /responses/compact``. ``GET`` / ``DELETE /responses/{id}`` answer from
the proxy's own store. Every refusal is in OpenAI's error shape.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from contextsvc.body_gate import BodyRefused
from contextsvc.engine.providers.common import ConversionError
from contextsvc.engine.providers.openai_responses_reply import response_events
from contextsvc.errors import ServiceError

from . import gate
from .providers import RESPONSES
from .relay import SESSION_HEADER
from .services.caller import caller_for
from .services.responses import prepare_responses, session_sync_responses
from .services.responses_compaction import (
    compacted_response,
    compaction_answer,
    compaction_kind,
    session_compact_for_client,
    without_request,
)
from .services.store import stored_response_delete, stored_response_get
from .views import _STATUS, conversion_error, provider_error, proxy_call, service_error

logger = logging.getLogger(__name__)


class Refused(Exception):
    """A call answered with a provider-shaped error before anything was forwarded."""

    def __init__(self, response: JsonResponse) -> None:
        self.response = response


def _compact(headers: Mapping[str, str], body: dict[str, Any], form: str) -> tuple[Any, str | None]:
    """Sync the history as a call would, then compact it (errors as ``proxy_call`` answers them).

    ``form``: how the client asked (checkpoint, trigger, compact), kept in the run's reason."""
    try:
        converted = RESPONSES.convert(body)
        gate.check_tools(body, converted)
        _, session, _ = session_sync_responses(
            dialect=RESPONSES, headers=headers, body=body, converted=converted
        )
    except ConversionError as exc:
        raise Refused(conversion_error(RESPONSES, exc)) from exc
    except BodyRefused as exc:
        raise Refused(gate.refusal(RESPONSES, exc)) from exc
    except ServiceError as exc:
        raise Refused(service_error(RESPONSES, exc)) from exc
    return session, session_compact_for_client(session=session, form=form)


def _sse(response: dict[str, Any]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in response_events(response)
    )


async def _answer_compaction(
    request: HttpRequest, body: dict[str, Any], kind: str
) -> HttpResponse | None:
    """Our compaction as the answer (module ``services.responses_compaction``); None: forward."""
    session, summary = await sync_to_async(_compact)(request.headers, without_request(body), kind)
    if summary is None:
        if kind == "checkpoint":
            return None  # nothing of ours to give: the model writes the checkpoint
        return provider_error(RESPONSES, 400, "Nothing to compact yet.")
    model = str(body.get("model") or "")
    answer = compaction_answer(kind=kind, session=session, summary=summary, model=model)
    if body.get("stream"):
        out = HttpResponse(_sse(answer), content_type="text/event-stream")
    else:
        out = JsonResponse(answer)
    out[SESSION_HEADER] = session.external_id
    return out


@csrf_exempt
@gate.body_released
async def responses_create(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    try:
        kind = None
        if request.method == "POST":
            try:
                body = gate.read(request, RESPONSES)
                kind = compaction_kind(body)
            except (BodyRefused, ConversionError):
                pass  # proxy_call answers it
        if kind is not None:
            answered = await _answer_compaction(request, body, kind)
            if answered is not None:
                return answered
        return await proxy_call(request, RESPONSES, "responses", prepare_fn=prepare_responses)
    except Refused as exc:
        return exc.response
    except Exception:
        logger.exception("proxy: responses call failed")
        return provider_error(RESPONSES, 500, "contextsvc proxy: internal error (logged)")


@csrf_exempt
@gate.body_released
async def responses_compact(request: HttpRequest) -> HttpResponse:
    """``POST /responses/compact``: our compaction, in the API's ``response.compaction`` shape."""
    if request.method != "POST":
        return provider_error(RESPONSES, 405, f"Method {request.method} not allowed")
    try:
        body = gate.read(request, RESPONSES)
        session, summary = await sync_to_async(_compact)(request.headers, body, "compact")
    except BodyRefused as exc:
        return gate.refusal(RESPONSES, exc)
    except ConversionError as exc:
        return conversion_error(RESPONSES, exc)
    except Refused as exc:
        return exc.response
    except Exception:
        logger.exception("proxy: responses compact failed")
        return provider_error(RESPONSES, 500, "contextsvc proxy: internal error (logged)")
    if summary is None:
        return provider_error(RESPONSES, 400, "Nothing to compact yet.")
    out = JsonResponse(compacted_response(body=body, session=session, summary=summary))
    out[SESSION_HEADER] = session.external_id
    return out


def _stored(headers, response_id: str, delete: bool) -> dict:
    caller = caller_for(RESPONSES, headers, upstream=False)  # the proxy's own store
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
