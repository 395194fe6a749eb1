"""Gemini ``generateContent`` as a provider API of the proxy (``/proxy/gemini/v1beta/…``).

The model is named by the URL (``models/{model}:generateContent``), never the
body: the view puts it on the body as ``model`` for the session's profile, and
the managed body leaves it out again; the upstream URL keeps the client's path.
A stream is asked for by the path (``:streamGenerateContent?alt=sse``), not a
body field. The key travels as ``x-goog-api-key`` (a ``?key=`` of the query is
read as that header by the view). With built-in tools or a final-report tool to
answer, a stream goes through ``GeminiFilter``; otherwise its bytes go out as
they come.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from contextsvc.engine.providers import gemini as gemini_format
from contextsvc.engine.providers import gemini_stream
from contextsvc.engine.providers.common import Converted, Reply
from contextsvc.engine.providers.gemini_contents import contents_from_transcript
from contextsvc.engine.providers.sse import SseEvent

from .base import Dialect, ToTranscript, error_number, register
from .gemini_fields import (
    gemini_contents,
    gemini_envelope,
    gemini_leading,
    gemini_system,
    gemini_tools,
)
from .gemini_stream import GeminiFilter
from .report import report_text

# The client's headers that go upstream; its key is re-set per credentials mode.
_FORWARDED = ("user-agent", "x-goog-api-client", "x-goog-user-project")
KEY_HEADER = "x-goog-api-key"
# The field the services read a call's output limit from (``with_route``).
ROUTED_LIMIT = "max_tokens"
# "The input token count (210000) exceeds the maximum number of tokens allowed (200000)."
_OVERFLOW = "exceeds the maximum number of tokens allowed"
_WINDOW = re.compile(r"maximum number of tokens allowed \((\d+)\)")
_SIZE = re.compile(r"input token count \((\d+)\)")
STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class GeminiProxyStream(gemini_stream.GeminiStream):
    """The engine's accumulator, also giving the answer as one response (for the echo's
    fingerprint and the whole-response helpers)."""

    @property
    def response(self) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(self._parts)}}
        if self._finish:
            candidate["finishReason"] = self._finish
        return {"candidates": [candidate], "usageMetadata": self._usage or {}}


def _candidate_parts(response: dict[str, Any]) -> list[dict[str, Any]] | None:
    candidates = response.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return None
    parts = (candidates[0].get("content") or {}).get("parts")
    return parts if isinstance(parts, list) else None


def _with_parts(response: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    first = response["candidates"][0]
    content = {**(first.get("content") or {}), "parts": parts}
    return {**response, "candidates": [{**first, "content": content}, *response["candidates"][1:]]}


def _open_calls(before: Any, stored: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """The calls a slice of contents may answer: those of the model turn just before it
    (the API wants responses right after their calls), with the ids the converter gave
    them when that turn was synced (made up the same way for id-less calls).

    ``stored``: the session's unanswered calls (id → name). The turn before is the
    reply the proxy stored, echoed by the client; Gemini CLI echoes a call the API
    sent without an id with an id of its own making (and answers under it), so an
    echoed id the session does not know stands for the session's oldest open call
    of that name."""
    if not isinstance(before, dict) or before.get("role") != "model":
        return []
    parts = [p for p in before.get("parts") or () if isinstance(p, dict)]
    calls = gemini_format.model_to_transcript(parts).get("tool_calls") or ()
    echoed = [(call["id"], call["name"]) for call in calls]
    if not stored:
        return echoed
    unused = [cid for cid in stored if cid not in {c for c, _ in echoed}]
    out = []
    for call_id, name in echoed:
        if call_id not in stored:
            match = next((cid for cid in unused if stored[cid] == name), None)
            if match is not None:
                unused.remove(match)
                call_id = match
        out.append((call_id, name))
    return out


def _call_name(part: Any) -> str | None:
    call = part.get("functionCall") if isinstance(part, dict) else None
    return call.get("name") if isinstance(call, dict) else None


class GeminiGenerate(Dialect):
    name = "gemini"
    fmt = "gemini"
    provider = "google"

    messages_key = "contents"
    vendor = "Gemini"
    output_limit_hint = "lower generationConfig.maxOutputTokens (e.g. {suggest})"
    path_prefix = "/proxy/gemini/"
    url_setting = "CONTEXTSVC_UPSTREAM_GEMINI_URL"
    version_path = "/v1beta/"
    key_setting = "CONTEXTSVC_UPSTREAM_GEMINI_API_KEY"

    def ends_stream(self, event: SseEvent) -> bool:
        # Gemini's events have no names: the chunk with a finishReason is the last.
        return '"finishReason"' in event.data

    # --- the request ---------------------------------------------------------------

    def convert(self, body: dict[str, Any], *, messages: bool = True) -> Converted:
        return gemini_format.request_to_transcript(body, messages=messages)

    def check_body(self, body: dict[str, Any]) -> None:
        gemini_envelope(body)
        gemini_system(body.get("systemInstruction", body.get("system_instruction")))
        if body.get("tools") is not None:
            gemini_tools(body["tools"])
        gemini_contents(gemini_leading(body.get("contents")))

    def check_messages(self, messages: list[Any], base: int) -> None:
        gemini_contents(messages, base)

    def output_key(self, parent: dict[str, Any]) -> str | None:
        return None

    def client_messages(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return body["contents"]

    def instructions(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> Any:
        return body.get("systemInstruction", body.get("system_instruction"))

    def to_transcript(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        open_calls: Mapping[str, str] | None = None,
    ) -> ToTranscript:
        def convert(part: list[dict[str, Any]], offset: int) -> list[dict[str, Any]]:
            self.check_messages(part, offset)
            opened = _open_calls(messages[offset - 1], open_calls) if offset > 0 else ()
            return gemini_format.contents_to_transcript(part, offset=offset, open_calls=opened)

        return convert

    def with_route(self, body: dict[str, Any], route: dict[str, Any]) -> dict[str, Any]:
        """Also the output limit as ``max_tokens``: the session follows it and the guard
        reserves it, as for the other APIs (both leave again in ``upstream_body``)."""
        out = {**body, **route}
        limit = (body.get("generationConfig") or {}).get("maxOutputTokens")
        if limit is not None:
            out[ROUTED_LIMIT] = limit
        return out

    def streams(self, body: dict[str, Any], path: str) -> bool:
        return ":streamGenerateContent" in path

    # --- the managed request -----------------------------------------------------------

    def upstream_body(
        self, converted: Converted, built: dict[str, Any], *, final: bool
    ) -> dict[str, Any]:
        """The client's fields (less those ``with_route`` added) with the managed
        instruction, contents and tools; the client's ``generationConfig`` wins over the
        build's (the build only sets the output limit)."""
        body = {k: v for k, v in converted.rest.items() if k not in ("model", ROUTED_LIMIT)}
        body["contents"] = built["contents"]
        if built.get("systemInstruction"):
            body["systemInstruction"] = built["systemInstruction"]
        tools = list(built.get("tools") or ())
        if not final:
            tools.extend(converted.other_tools)
        if tools:
            body["tools"] = tools
        else:
            body.pop("toolConfig", None)
        if final:
            body.pop("toolConfig", None)
        if "generationConfig" not in body and built.get("generationConfig"):
            body["generationConfig"] = built["generationConfig"]
        return body

    # --- the reply -----------------------------------------------------------------

    def reply_from_response(self, response: dict[str, Any]) -> Reply:
        return gemini_stream.reply_from_response(response)

    def stream(self) -> GeminiProxyStream:
        return GeminiProxyStream()

    def stream_filter(
        self, runnable: frozenset[str], final: str | None, *, strip_usage: bool
    ) -> GeminiFilter | None:
        if not runnable and not final:
            return None  # nothing of the stream is the proxy's to hide: bytes as they come
        return GeminiFilter(runnable, final)

    def client_message(self, reply: Reply, response: dict[str, Any] | None) -> dict[str, Any]:
        parts = _candidate_parts(response) if response is not None else None
        if parts is not None:
            return {"role": "model", "parts": parts}
        return contents_from_transcript([reply.message])[0]

    def final_as_text(self, response: dict[str, Any], name: str) -> dict[str, Any]:
        parts = _candidate_parts(response)
        if parts is None:
            return response
        out = [
            {"text": report_text(p["functionCall"].get("args") or {})}
            if _call_name(p) == name
            else p
            for p in parts
        ]
        return _with_parts(response, out)

    def strip_calls(self, response: dict[str, Any], names: set[str]) -> dict[str, Any]:
        parts = _candidate_parts(response)
        if parts is None:
            return response
        return _with_parts(response, [p for p in parts if _call_name(p) not in names])

    def with_note(self, response: dict[str, Any], note: str) -> dict[str, Any]:
        parts = _candidate_parts(response)
        if parts is None:
            return response
        return _with_parts(response, [*parts, {"text": note}])

    # --- errors ----------------------------------------------------------------------

    def error_body(self, status: int, message: str, kind: str | None = None) -> dict[str, Any]:
        code = STATUSES.get(status, "UNKNOWN")
        return {"error": {"code": status, "message": message, "status": code}}

    def error_event(self, error: dict[str, Any]) -> bytes:
        body = {"error": {"code": 500, "status": "INTERNAL", **error}}
        return f"data: {json.dumps(body)}\n\n".encode()

    def is_overflow(self, status: int, body: Any) -> bool:
        if status != 400 or not isinstance(body, dict):
            return False
        error = body.get("error")
        return isinstance(error, dict) and _OVERFLOW in str(error.get("message", ""))

    def reported_window(self, body: Any) -> int | None:
        return error_number(body, _WINDOW)

    def reported_size(self, body: Any) -> int | None:
        return error_number(body, _SIZE)

    # --- credentials and upstream ----------------------------------------------------------

    def provider_key(self, headers: Mapping[str, str]) -> str | None:
        return headers.get(KEY_HEADER) or None

    def upstream_headers(self, headers: Mapping[str, str], key: str | None) -> dict[str, str]:
        out = {name: headers[name] for name in _FORWARDED if headers.get(name)}
        if key:
            out[KEY_HEADER] = key
        return out


GEMINI = register(GeminiGenerate())
