"""OpenAI Responses as a provider API of the proxy (``/proxy/openai/v1/responses``).

Its conversation is a list of items, grouped into units (one message each)
by ``contextsvc.engine.providers.openai_responses``; the proxy is its store
(``services.store``), so upstream is called statelessly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from contextsvc.engine.providers import openai_responses_reply
from contextsvc.engine.providers.common import Converted, Reply
from contextsvc.engine.providers.openai_responses import request_to_transcript
from contextsvc.engine.providers.openai_responses_reply import ResponsesStream

from .. import gate_fields as f
from .base import ToTranscript, register
from .openai_common import OpenAIVendor
from .openai_fields import responses_input, responses_tools, responses_units
from .responses_body import client_message as message_for_client
from .responses_body import client_units, input_items, instruction_items, units_to_transcript
from .responses_body import strip_calls as without_calls
from .responses_body import upstream_body as body_for_upstream
from .responses_items import responses_as_text, responses_with_note
from .responses_stream import ResponsesFilter

# A Responses client's headers all go upstream (Codex's session-id, thread-id,
# x-codex-*), but for these: the proxy's own, the credentials, and the
# framing of a body the proxy rewrites.
_NOT_FORWARDED = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "accept-encoding",
        "authorization",
        "x-api-key",
        "cookie",
        "upgrade",
        "te",
        "trailer",
        "proxy-authorization",
    }
)


class Responses(OpenAIVendor):
    name = "responses"
    output_limit_hint = "lower max_output_tokens (e.g. {suggest})"
    fmt = "responses"
    messages_key = "input"
    stores_responses = True

    def convert(self, body: dict[str, Any], *, messages: bool = True) -> Converted:
        return request_to_transcript(body, messages=messages, items=input_items(body))

    def check_body(self, body: dict[str, Any]) -> None:
        f.envelope(body, ("tools", "input"), ("max_output_tokens",))
        f.text(body.get("previous_response_id"), "previous_response_id")
        f.text(body.get("instructions"), "instructions")
        if body.get("tools") is not None:
            responses_tools(body["tools"])
        items = body.get("input")
        responses_input(items if type(items) is not list else f.leading(items, "input"))

    def check_messages(self, messages: list[Any], base: int) -> None:
        """``messages``: units (``client_messages``)."""
        responses_units(messages, base)

    def output_key(self, parent: dict[str, Any]) -> str | None:
        kind = parent.get("type")
        return "output" if kind in ("function_call_output", "custom_tool_call_output") else None

    def client_messages(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return client_units(body)

    def instructions(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> Any:
        return instruction_items(body)

    def to_transcript(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        open_calls: Mapping[str, str] | None = None,
    ) -> ToTranscript:
        return units_to_transcript  # checks them too

    def upstream_body(
        self, converted: Converted, built: dict[str, Any], *, final: bool
    ) -> dict[str, Any]:
        return body_for_upstream(converted, built, final=final)

    def reply_from_response(self, response: dict[str, Any]) -> Reply:
        return openai_responses_reply.reply_from_response(response)

    def stream(self) -> ResponsesStream:
        return ResponsesStream()

    def stream_filter(
        self, runnable: frozenset[str], final: str | None, *, strip_usage: bool
    ) -> ResponsesFilter | None:
        return ResponsesFilter(runnable, final) if runnable or final else None

    def client_message(self, reply: Reply, response: dict[str, Any] | None) -> dict[str, Any]:
        return message_for_client(reply, response)

    def final_as_text(self, response: dict[str, Any], name: str) -> dict[str, Any]:
        return responses_as_text(response, name)

    def strip_calls(self, response: dict[str, Any], names: set[str]) -> dict[str, Any]:
        return without_calls(response, names)

    def with_note(self, response: dict[str, Any], note: str) -> dict[str, Any]:
        return responses_with_note(response, note)

    def error_event(self, error: dict[str, Any]) -> bytes:
        body = {"type": "error", "code": error.get("code"), "message": error.get("message", "")}
        return f"event: error\ndata: {json.dumps(body)}\n\n".encode()

    def upstream_headers(self, headers: Mapping[str, str], key: str | None) -> dict[str, str]:
        out = {
            name.lower(): value
            for name, value in headers.items()
            if name.lower() not in _NOT_FORWARDED and not name.lower().startswith("x-contextsvc")
        }
        if key:
            out["authorization"] = f"Bearer {key}"
        return out


RESPONSES = register(Responses())
