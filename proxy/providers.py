"""The provider dialects the proxy speaks: their requests, replies, streams, errors and keys."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from contextsvc.engine.providers import anthropic as anthropic_format
from contextsvc.engine.providers import openai_chat, openai_responses_reply
from contextsvc.engine.providers.common import Converted, Reply
from contextsvc.engine.providers.openai_responses import request_to_transcript as responses_in
from contextsvc.engine.providers.openai_responses_reply import ResponsesStream
from contextsvc.engine.providers.sse import AnthropicStream, OpenAIStream

from .services import responses_body

# Headers of the client's request forwarded upstream (lower case); the body's
# length and encoding are the proxy's own, the credentials are chosen per mode.
_FORWARDED = (
    "openai-organization",
    "openai-project",
    "user-agent",
    "x-app",
)
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
# Every header with one of these prefixes goes upstream unchanged: the
# provider's own (``anthropic-beta`` turns on what the client's fields need,
# e.g. ``context_management``) and Claude Code's (``x-claude-code-session-id``).
_FORWARDED_PREFIXES = ("anthropic-", "x-claude-code-")
# "prompt is too long: 210000 tokens > 200000 maximum" / "maximum context length is 8192 tokens"
_ANTHROPIC_WINDOW = re.compile(r"tokens? > (\d+) maximum")
_OPENAI_WINDOW = re.compile(r"maximum context length is (\d+) tokens")
# The request's own size in the same messages: "210000 tokens > ..." / "your messages resulted
# in 9000 tokens" (Chat Completions) / "you requested 9000 tokens".
_ANTHROPIC_SIZE = re.compile(r"(\d+) tokens? > \d+ maximum")
_OPENAI_SIZE = re.compile(r"(?:resulted in|requested) (\d+) tokens")
# Upstream response headers relayed to the client (rate-limit figures, request ids).
_RELAYED_PREFIXES = (
    "anthropic-",
    "x-ratelimit-",
    "openai-",
    "retry-after",
    "request-id",
    "x-request-id",
)


def _error_number(body: Any, pattern: re.Pattern[str]) -> int | None:
    """The first number ``pattern`` finds in an upstream error's message, or None."""
    error = body.get("error") if isinstance(body, dict) else None
    message = str(error.get("message", "")) if isinstance(error, dict) else ""
    match = pattern.search(message)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class Dialect:
    """One provider: how its bodies convert, where upstream is, how it says an error."""

    name: str
    fmt: str  # the context build's format
    convert: Callable[..., Converted]  # (body, *, messages=True)
    reply_from_response: Callable[[dict[str, Any]], Reply]
    stream: Callable[[], AnthropicStream | OpenAIStream | ResponsesStream]
    messages_key: str
    provider: str = ""  # the session's provider (its model profiles) when not ``name``

    def envelope(self, body: dict[str, Any]) -> Converted:
        """The request without its conversation: the proxy converts (validates) only what
        its session does not hold yet (``services.sync.plan_client_sync``)."""
        return self.convert(body, messages=False)

    def upstream_url(self, path: str) -> str:
        if self.name == "anthropic":
            return f"{settings.CONTEXTSVC_UPSTREAM_ANTHROPIC_URL}/v1/{path}"
        return f"{settings.CONTEXTSVC_UPSTREAM_OPENAI_URL}/{path}"

    def upstream_setting(self) -> str:
        """The setting that names upstream (error messages name it with the host)."""
        return f"CONTEXTSVC_UPSTREAM_{self._vendor()}_URL"

    def managed_key(self) -> str | None:
        if self.name == "anthropic":
            return settings.CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY
        return settings.CONTEXTSVC_UPSTREAM_OPENAI_API_KEY

    def managed_key_setting(self) -> str:
        return f"CONTEXTSVC_UPSTREAM_{self._vendor()}_API_KEY"

    def _vendor(self) -> str:
        return "ANTHROPIC" if self.name == "anthropic" else "OPENAI"

    def error_body(self, status: int, message: str, kind: str | None = None) -> dict[str, Any]:
        """The provider's own error shape, so its SDK raises its usual exception."""
        kind = kind or error_type(status)
        if self.name == "anthropic":
            return {"type": "error", "error": {"type": kind, "message": message}}
        code = "context_length_exceeded" if kind == "context_length_exceeded" else None
        if kind == "context_length_exceeded":
            kind = "invalid_request_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def is_overflow(self, status: int, body: Any) -> bool:
        """Upstream said the prompt does not fit the model's window
        (docs/concepts/compaction.md#overflow)."""
        if status not in (400, 413) or not isinstance(body, dict):
            return False
        error = body.get("error")
        if not isinstance(error, dict):
            return False
        if self.name == "anthropic":
            return "prompt is too long" in str(error.get("message", "")).lower()
        return error.get("code") == "context_length_exceeded"

    def reported_window(self, body: Any) -> int | None:
        """The window upstream says the model has, from its "too long" message (None if unsaid)."""
        pattern = _ANTHROPIC_WINDOW if self.name == "anthropic" else _OPENAI_WINDOW
        return _error_number(body, pattern)

    def reported_size(self, body: Any) -> int | None:
        """The request's size upstream counted, from its "too long" message (None if unsaid)."""
        pattern = _ANTHROPIC_SIZE if self.name == "anthropic" else _OPENAI_SIZE
        return _error_number(body, pattern)

    def provider_key(self, headers: Mapping[str, str]) -> str | None:
        """The provider key the client sent (``x-api-key`` or ``Authorization: Bearer``)."""
        key = headers.get("x-api-key")
        if key:
            return key
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip() or None
        return None

    def upstream_headers(self, headers: Mapping[str, str], key: str | None) -> dict[str, str]:
        if self.name == "responses":
            out = {
                name.lower(): value
                for name, value in headers.items()
                if name.lower() not in _NOT_FORWARDED
                and not name.lower().startswith("x-contextsvc")
            }
        else:
            out = {name: headers[name] for name in _FORWARDED if headers.get(name)}
            for name, value in headers.items():
                if name.lower().startswith(_FORWARDED_PREFIXES):
                    out[name.lower()] = value
        if key:
            if self.name == "anthropic":
                out["x-api-key"] = key
            else:
                out["authorization"] = f"Bearer {key}"
        if self.name == "anthropic":
            out.setdefault("anthropic-version", "2023-06-01")
        return out

    def client_message(self, reply: Reply, response: dict[str, Any] | None) -> dict[str, Any]:
        """The reply as the client will send it back in its history (for its fingerprint)."""
        if self.name == "responses":
            return responses_body.client_message(reply, response)
        if self.name == "anthropic":
            if response is not None and isinstance(response.get("content"), list):
                return {"role": "assistant", "content": response["content"]}
            return anthropic_format.messages_from_transcript([reply.message])[0]
        if response is not None:
            choices = response.get("choices") or [{}]
            message = dict(choices[0].get("message") or {})
            message.setdefault("role", "assistant")
            return message
        return openai_chat.messages_from_transcript([reply.message])[0]


def relayed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream response headers the client gets too."""
    return {
        name: value for name, value in headers.items() if name.lower().startswith(_RELAYED_PREFIXES)
    }


def error_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        502: "api_error",
        504: "api_error",
        529: "overloaded_error",
    }.get(status, "api_error")


ANTHROPIC = Dialect(
    name="anthropic",
    fmt="anthropic",
    convert=anthropic_format.request_to_transcript,
    reply_from_response=anthropic_format.reply_from_response,
    stream=AnthropicStream,
    messages_key="messages",
)
OPENAI = Dialect(
    name="openai",
    fmt="openai",
    convert=openai_chat.request_to_transcript,
    reply_from_response=openai_chat.reply_from_response,
    stream=OpenAIStream,
    messages_key="messages",
)
RESPONSES = Dialect(
    name="responses",
    fmt="responses",
    convert=responses_in,
    reply_from_response=openai_responses_reply.reply_from_response,
    stream=ResponsesStream,
    messages_key="input",
    provider="openai",
)
