"""The proxy's request gate: every body is sized, parsed and checked here before any other work.

The shared steps are ``contextsvc.body_gate``'s (size, strict JSON); then the
NUL rule and the dialect's field rules (``gate_fields``). A refusal is a
``BodyRefused`` naming the field, answered in the provider's error shape
(``refusal``), before anything is read from or written to the database.

A body whose ``Content-Length`` is over the limit is refused by
``limit_bodies`` in front of Django (which reads a whole ASGI body before any
view runs): its bytes are never read. One sent without ``Content-Length`` is
counted as it arrives and refused once it passes the limit.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse

from contextsvc import body_gate
from contextsvc.body_gate import BodyRefused
from contextsvc.engine.providers.common import Converted
from contextsvc.errors import ValidationFailed
from contextsvc.lru import BoundedLRU
from contextsvc.nul import NUL
from sessions.services import tools as tools_service
from sessions.services.inputs import ToolData

from . import gate_fields as f
from .body_reuse import BodyReuse
from .object_prefix import accepted_within
from .providers import ANTHROPIC, Dialect, serving

_NUL_ESCAPE = b"\\u0000"

# Per conversation, the last body that passed the gate: the next one parses only
# what follows the messages they share (``body_reuse``). Bounded by the bytes kept
# (a 2,000-message Claude Code body is about 0.7 MB; its parsed messages about
# twice that); a history shorter than REUSE_LEAST messages is parsed whole.
REUSE_SLOTS = 256
REUSE_MAX_BYTES = 32 * 2**20
REUSE_LEAST = 64
_REUSE = BodyReuse(
    slots=REUSE_SLOTS, max_bytes=REUSE_MAX_BYTES, least=REUSE_LEAST, watch=_NUL_ESCAPE
)
# The headers that tell one caller and conversation from another (a slot is only
# where to look: what is reused is checked byte for byte).
_SLOT_HEADERS = (
    "x-contextsvc-key",
    "x-contextsvc-session",
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "session-id",
    "x-session-id",
    "x-claude-code-session-id",
)


def read(request: HttpRequest, dialect: Dialect) -> dict[str, Any]:
    """The request's body, checked (module doc); ``BodyRefused`` otherwise."""
    cached = getattr(request, "_gated_body", None)
    if cached is not None:
        return cached  # a view that looked at it first (the Responses compaction test)
    raw = _raw(request)
    slot = _slot(request, raw)
    body, pending = _REUSE.parse(raw, slot, dialect.messages_key, _json_object)
    if pending is not None:  # searched past the bytes it shares with a clean previous body
        escaped = not pending.kept.clean
    else:
        escaped = b"\\" in raw and _NUL_ESCAPE in raw
    if escaped:
        where = find_nul(dialect, body)
        if where is not None:
            raise BodyRefused("text must not contain NUL characters (\\u0000)", where)
    if pending is not None:  # the messages taken from the previous body passed already
        with accepted_within(body[dialect.messages_key], pending.reused):
            check(dialect, body)
    else:
        check(dialect, body)
    _REUSE.keep(raw, slot, dialect.messages_key, body, pending)
    request._gated_body = body  # type: ignore[attr-defined]
    return body


def _slot(request: HttpRequest, raw: bytes) -> bytes:
    """Where the request's conversation keeps its last body: its path, caller and session
    headers and its first 2 KB (the start of its history)."""
    headers = request.headers
    digest = hashlib.blake2b(request.path.encode(), digest_size=16)
    for name in _SLOT_HEADERS:
        digest.update(b"\0" + (headers.get(name) or "").encode("utf-8", "surrogatepass"))
    digest.update(b"\0" + raw[:2048])
    return digest.digest()


def body_released(view: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A proxy view whose request lets go of its checked body once the view returns.

    Django's ASGI handler leaves every request in a reference cycle (the task
    that listens for a disconnect ends on an exception whose traceback holds
    the handler's frame), so whatever the request holds lives until a garbage
    collection finds it. Kept there, the parsed history of a long session
    (thousands of dicts) was scanned by the collections that followed and
    promoted to the oldest generation on every call. The call itself keeps
    what it needs: the relay holds the body as long as the stream runs.
    """

    @functools.wraps(view)
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        try:
            return await view(request, *args, **kwargs)
        finally:
            # The raw bytes too (Django's ``request.body`` cache): not scanned
            # by the collector, but a megabyte a call held until it runs.
            request.__dict__.pop("_gated_body", None)
            request.__dict__.pop("_body", None)

    wrapper.releases_body = True  # type: ignore[attr-defined]
    return wrapper


def read_json(request: HttpRequest) -> dict[str, Any]:
    """The body sized and parsed, a JSON object; no field rules (a body relayed as it is)."""
    return _json_object(_raw(request))


def _raw(request: HttpRequest) -> bytes:
    """The body's bytes, refused over the path's size limit (``body_gate``)."""
    limit = body_gate.body_limit(request.path)
    body_gate.check_declared(request.headers, limit)
    try:
        raw = request.body
    except RequestDataTooBig as exc:
        raise body_gate.too_large(limit) from exc
    body_gate.check_read(raw, limit)
    return raw


def _json_object(raw: bytes) -> dict[str, Any]:
    body = body_gate.parse_json(raw)
    if type(body) is not dict:
        raise BodyRefused("expected a JSON object")
    return body


def check(dialect: Dialect, body: dict[str, Any]) -> None:
    """The dialect's field rules on a parsed body (``Dialect.check_body``).

    The history is not walked whole on every call: each message is checked
    to be an object, and the leading ones (what the conversation's id reads)
    in full; the rest are checked by ``Dialect.check_messages`` on the
    part a call converts, before anything is written.
    """
    dialect.check_body(body)


# Digests of client tool lists already found valid: an agent sends the same
# tools on every call, and the check (JSON Schema per tool) is then skipped.
_VALID_TOOLS: BoundedLRU[bytes, bool] = BoundedLRU(4096)


def check_tools(body: dict[str, Any], converted: Converted) -> None:
    """The client's tools as ``PUT tools`` checks them (JSON Schema, names), before any write."""
    if not converted.tools:
        return
    digest = hashlib.sha256(orjson.dumps(body.get("tools"))).digest()
    if _VALID_TOOLS.get(digest):
        return
    tools: list[ToolData] = [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": t.input_schema,
            "category": t.category,
        }
        for t in converted.tools
    ]
    try:
        tools_service.check_tools(tools)
    except ValidationFailed as exc:
        field = (exc.details or {}).get("field", "tools")
        raise BodyRefused(exc.message, field) from exc
    _VALID_TOOLS.put(digest, True)


def refusal(dialect: Dialect, exc: BodyRefused) -> JsonResponse:
    return shaped(dialect, exc.status, exc.message, exc.field)


def shaped(dialect: Dialect, status: int, message: str, field: str) -> JsonResponse:
    """A refusal in the provider's error shape; OpenAI's names the field in ``param``
    (Anthropic's has no such key: its message starts with the field)."""
    error = dialect.error_body(status, message)
    if "param" in error.get("error", {}):
        error["error"]["param"] = field
    return JsonResponse(error, status=status)


# --- NUL ------------------------------------------------------------------------


def find_nul(dialect: Dialect, body: Any) -> str | None:
    """The dotted path of the first string holding a NUL, tool output text excepted.

    Tool output is data: the append stores it as bytes and shows the NUL
    escaped (``contextsvc.nul``). Every other text is refused.
    """
    stack: list[tuple[Any, str, bool]] = [(body, "", False)]
    while stack:
        value, where, output = stack.pop()
        if type(value) is str:
            if NUL in value and not output:
                return where or "body"
        elif type(value) is dict:
            exempt = dialect.output_key(value)
            for key, item in value.items():
                path = f"{where}.{key}" if where else key
                if NUL in key:
                    return path
                if key == exempt:
                    stack.extend(_output_items(item, path))
                elif output and key == "text":
                    stack.append((item, path, True))
                else:
                    stack.append((item, path, False))
        elif type(value) is list:
            stack.extend((item, f"{where}.{i}", False) for i, item in enumerate(value))
    return None


def _output_items(value: Any, where: str) -> list[tuple[Any, str, bool]]:
    if type(value) is str:
        return [(value, where, True)]
    if type(value) is list:  # parts: a text part's text is output too
        return [
            (item, f"{where}.{i}", type(item) is dict and item.get("type") in f.TEXT_PARTS)
            for i, item in enumerate(value)
        ]
    return [(value, where, False)]


# --- size, in front of Django ------------------------------------------------------

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]


def _dialect_of(path: str) -> Dialect:
    return serving(path, ANTHROPIC)


async def _refuse_size(send: Callable, dialect: Dialect, limit: int) -> None:
    response = refusal(dialect, body_gate.too_large(limit))
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


def limit_bodies(app: ASGIApp) -> ASGIApp:
    """``app`` behind the size check of proxy bodies (module doc)."""

    async def guarded(scope: dict, receive: Callable, send: Callable) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith("/proxy/"):
            return await app(scope, receive, send)
        limit = body_gate.body_limit(path)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length = body_gate.declared_length(headers)
        if length is not None:
            if length > limit:
                return await _refuse_size(send, _dialect_of(path), limit)
            return await app(scope, receive, send)
        # No declared size: read it here, counting, and hand Django what arrived.
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > limit:
                return await _refuse_size(send, _dialect_of(path), limit)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        pending = iter(messages)

        async def replay() -> dict:
            return next(pending, None) or await receive()

        return await app(scope, replay, send)

    return guarded
