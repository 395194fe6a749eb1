"""Anthropic Messages as a provider API of the proxy (``/proxy/anthropic/v1/messages``)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from contextsvc.engine.providers import anthropic as anthropic_format
from contextsvc.engine.providers.common import Converted, Reply
from contextsvc.engine.providers.sse import AnthropicStream

from .. import gate_fields as f
from ..streaming import UsageStrip
from .anthropic_cache import cap_breakpoints
from .anthropic_fields import anthropic_messages, anthropic_system, anthropic_tools
from .anthropic_stream import AnthropicFilter
from .base import Dialect, ToTranscript, error_number, error_type, register, replaced_body
from .report import report_text

# Headers of the client's request forwarded upstream (lower case); the body's
# length and encoding are the proxy's own, the credentials are chosen per mode.
FORWARDED = (
    "openai-organization",
    "openai-project",
    "user-agent",
    "x-app",
)
# Every header with one of these prefixes goes upstream unchanged: the
# provider's own (``anthropic-beta`` turns on what the client's fields need,
# e.g. ``context_management``) and Claude Code's (``x-claude-code-session-id``).
FORWARDED_PREFIXES = ("anthropic-", "x-claude-code-")
# "prompt is too long: 210000 tokens > 200000 maximum": the window, and the request's size.
_WINDOW = re.compile(r"tokens? > (\d+) maximum")
_SIZE = re.compile(r"(\d+) tokens? > \d+ maximum")


def forwarded_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers that go upstream with a Messages or Chat Completions call."""
    out = {name: headers[name] for name in FORWARDED if headers.get(name)}
    for name, value in headers.items():
        if name.lower().startswith(FORWARDED_PREFIXES):
            out[name.lower()] = value
    return out


class AnthropicMessages(Dialect):
    name = "anthropic"
    fmt = "anthropic"
    provider = "anthropic"
    messages_key = "messages"
    output_limit_hint = (
        "lower max_tokens (Claude Code: set CLAUDE_CODE_MAX_OUTPUT_TOKENS, e.g. {suggest})"
    )
    vendor = "Anthropic"
    path_prefix = "/proxy/anthropic/"
    url_setting = "CONTEXTSVC_UPSTREAM_ANTHROPIC_URL"
    version_path = "/v1/"
    key_setting = "CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY"

    def convert(self, body: dict[str, Any], *, messages: bool = True) -> Converted:
        return anthropic_format.request_to_transcript(body, messages=messages)

    def check_body(self, body: dict[str, Any]) -> None:
        f.envelope(body, ("system", "tools", "messages"), ("max_tokens",))
        anthropic_system(body.get("system"))
        if body.get("tools") is not None:
            anthropic_tools(body["tools"])
        anthropic_messages(f.leading(body.get("messages"), "messages"))

    def check_messages(self, messages: list[Any], base: int) -> None:
        anthropic_messages(messages, base)

    def output_key(self, parent: dict[str, Any]) -> str | None:
        return "content" if parent.get("type") == "tool_result" else None

    def client_messages(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return body["messages"]

    def instructions(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> Any:
        return body.get("system")

    def to_transcript(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        open_calls: Mapping[str, str] | None = None,
    ) -> ToTranscript:
        def convert(part: list[dict[str, Any]], offset: int) -> list[dict[str, Any]]:
            self.check_messages(part, offset)
            return anthropic_format.messages_to_transcript(part, offset=offset)

        return convert

    def upstream_body(
        self, converted: Converted, built: dict[str, Any], *, final: bool
    ) -> dict[str, Any]:
        body = replaced_body(
            converted, built, final=final, system=True, add_extra=lambda t, e: t.update(e)
        )
        return cap_breakpoints(body)

    def reply_from_response(self, response: dict[str, Any]) -> Reply:
        return anthropic_format.reply_from_response(response)

    def stream(self) -> AnthropicStream:
        return AnthropicStream()

    def stream_filter(
        self, runnable: frozenset[str], final: str | None, *, strip_usage: bool
    ) -> AnthropicFilter | UsageStrip | None:
        if not runnable and not final:
            return UsageStrip() if strip_usage else None
        return AnthropicFilter(runnable, final)

    def client_message(self, reply: Reply, response: dict[str, Any] | None) -> dict[str, Any]:
        if response is not None and isinstance(response.get("content"), list):
            return {"role": "assistant", "content": response["content"]}
        return anthropic_format.messages_from_transcript([reply.message])[0]

    def final_as_text(self, response: dict[str, Any], name: str) -> dict[str, Any]:
        return anthropic_as_text(response, name)

    def noted_content(self, content: Any) -> Any:
        if isinstance(content, str) and content.strip():
            return [{"type": "text", "text": content}]  # the note is a block of its own
        return content

    def strip_calls(self, response: dict[str, Any], names: set[str]) -> dict[str, Any]:
        return strip_anthropic(response, names)

    def with_note(self, response: dict[str, Any], note: str) -> dict[str, Any]:
        return anthropic_with_note(response, note)

    def error_body(self, status: int, message: str, kind: str | None = None) -> dict[str, Any]:
        kind = kind or error_type(status)
        return {"type": "error", "error": {"type": kind, "message": message}}

    def error_event(self, error: dict[str, Any]) -> bytes:
        body = {"type": "error", "error": {"type": error.get("type", "api_error"), **error}}
        return f"event: error\ndata: {json.dumps(body)}\n\n".encode()

    def is_overflow(self, status: int, body: Any) -> bool:
        if status not in (400, 413) or not isinstance(body, dict):
            return False
        error = body.get("error")
        if not isinstance(error, dict):
            return False
        return "prompt is too long" in str(error.get("message", "")).lower()

    def reported_window(self, body: Any) -> int | None:
        return error_number(body, _WINDOW)

    def reported_size(self, body: Any) -> int | None:
        return error_number(body, _SIZE)

    def upstream_headers(self, headers: Mapping[str, str], key: str | None) -> dict[str, str]:
        out = forwarded_headers(headers)
        if key:
            out["x-api-key"] = key
        out.setdefault("anthropic-version", "2023-06-01")
        return out


ANTHROPIC = register(AnthropicMessages())


# --- the answer edited for the client -----------------------------------------


def strip_anthropic(response: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """A Messages response without the ``tool_use`` blocks of the given tools."""
    content = [
        b
        for b in response.get("content") or ()
        if not (b.get("type") == "tool_use" and b.get("name") in names)
    ]
    return {**response, "content": content}


def anthropic_with_note(response: dict[str, Any], note: str) -> dict[str, Any]:
    """A Messages response with the round-limit note as a last text block, and the stop
    reason of an answer."""
    out = {**response, "content": [*(response.get("content") or ()), _text_block(note)]}
    if out.get("stop_reason") == "tool_use" and not any(
        b.get("type") == "tool_use" for b in out["content"]
    ):
        out["stop_reason"] = "end_turn"
    return out


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def anthropic_as_text(response: dict[str, Any], name: str) -> dict[str, Any]:
    """A Messages response with its ``tool_use`` blocks of ``name`` turned into text blocks."""
    content = []
    for block in response.get("content") or ():
        if block.get("type") == "tool_use" and block.get("name") == name:
            block = {"type": "text", "text": report_text(block.get("input"))}
        content.append(block)
    out = {**response, "content": content}
    if out.get("stop_reason") == "tool_use" and not any(
        b.get("type") == "tool_use" for b in content
    ):
        out["stop_reason"] = "end_turn"
    return out
