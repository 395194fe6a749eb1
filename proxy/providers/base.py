"""The protocol every provider API of the proxy implements, and the registry that names them.

A provider API (Anthropic Messages, Chat Completions, Responses) is one
object: how its request is checked and converted, how the managed body is
built from the context, how its stream is accumulated and filtered, how it
says an error and a context overflow, how it carries credentials, where
upstream is. Code outside ``proxy.providers`` asks the object; it never
compares a provider's name.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

from django.conf import settings

from contextsvc.engine.providers.common import Converted, Reply
from contextsvc.engine.providers.sse import SseEvent

from ..outcome import named_end

# The converter a call's sync applies to a slice of the client's messages
# (``services.sync.ToTranscript``): (messages, their offset) -> transcript messages.
ToTranscript = Callable[[list[dict[str, Any]], int], list[dict[str, Any]]]
# Upstream response headers relayed to the client (rate-limit figures, request ids).
_RELAYED_PREFIXES = (
    "anthropic-",
    "x-ratelimit-",
    "openai-",
    "retry-after",
    "request-id",
    "x-request-id",
)


class Accumulator(Protocol):
    """What a stream's events add up to (``contextsvc.engine.providers.sse``)."""

    def feed(self, event: SseEvent) -> Any: ...

    def result(self, *, incomplete: bool | None = None) -> Reply: ...


class StreamFilter(Protocol):
    """What the client sees of a stream (``proxy.streaming``): built-in calls left out."""

    def feed(self, event: SseEvent) -> bytes: ...

    def end_round(self, *, again: bool, note: str | None = None) -> bytes: ...


def error_number(body: Any, pattern: re.Pattern[str]) -> int | None:
    """The first number ``pattern`` finds in an upstream error's message, or None."""
    error = body.get("error") if isinstance(body, dict) else None
    message = str(error.get("message", "")) if isinstance(error, dict) else ""
    match = pattern.search(message)
    return int(match.group(1)) if match else None


def bearer_or_api_key(headers: Mapping[str, str]) -> str | None:
    """The provider key the client sent (``x-api-key`` or ``Authorization: Bearer``)."""
    key = headers.get("x-api-key")
    if key:
        return key
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return None


class Dialect(ABC):
    """One provider API: its requests, replies, streams, errors, credentials and upstream."""

    name: ClassVar[str]  # the registry's name, the API's label in logs and spans
    fmt: ClassVar[str]  # the context build's format
    provider: ClassVar[str]  # the session's provider (its model profiles)
    messages_key: ClassVar[str]  # the body's field holding the conversation
    vendor: ClassVar[str]  # the vendor as users know it ("Anthropic"), in messages
    path_prefix: ClassVar[str]  # where its routes are under the proxy ("/proxy/anthropic/")
    url_setting: ClassVar[str]  # the setting naming upstream's base URL
    version_path: ClassVar[str] = "/"  # between that URL and the client's path ("/v1/")
    key_setting: ClassVar[str]  # the setting holding the server's key (managed credentials)
    # The ``type`` of the 400 said when even the final-turn context does not fit.
    too_large_kind: ClassVar[str] = "invalid_request_error"
    # The proxy keeps its answers (the Responses store, ``services.store``).
    stores_responses: ClassVar[bool] = False
    # How a client of this API lowers its output limit, for the window's 400.
    output_limit_hint: ClassVar[str] = "lower max_tokens"

    # --- the request ---------------------------------------------------------------

    @abstractmethod
    def convert(self, body: dict[str, Any], *, messages: bool = True) -> Converted:
        """The request in the transcript's terms (``ConversionError`` if it does not convert)."""

    def envelope(self, body: dict[str, Any]) -> Converted:
        """The request without its conversation: the proxy converts (validates) only what
        its session does not hold yet (``services.sync.plan_client_sync``)."""
        return self.convert(body, messages=False)

    @abstractmethod
    def check_body(self, body: dict[str, Any]) -> None:
        """The field rules on a parsed body (``gate_fields``): ``BodyRefused`` otherwise."""

    @abstractmethod
    def check_messages(self, messages: list[Any], base: int) -> None:
        """The message rules on the part of the history a call converts; ``base``: the
        index of ``messages[0]`` in the request."""

    @abstractmethod
    def output_key(self, parent: dict[str, Any]) -> str | None:
        """The key of ``parent`` holding tool output (its text may hold NULs), if any."""

    @abstractmethod
    def client_messages(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The conversation part of the client's messages (without leading instructions)."""

    @abstractmethod
    def instructions(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> Any:
        """What stands before the conversation (``messages``: ``client_messages``), for the
        id of a session derived from it."""

    @abstractmethod
    def to_transcript(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        open_calls: Mapping[str, str] | None = None,
    ) -> ToTranscript:
        """The converter of slices of ``messages`` (``client_messages(body)``), checking them.
        ``open_calls``: the session's unanswered calls (id → name), when it has one."""

    def ends_stream(self, event: SseEvent) -> bool:
        """Whether ``event`` is the one that ends a whole stream (its final event)."""
        return named_end(event)

    def with_route(self, body: dict[str, Any], route: dict[str, Any]) -> dict[str, Any]:
        """The checked body with what the URL names (``route``: Gemini's model), in the
        fields the services read (``model``, ``max_tokens``)."""
        return {**body, **route}

    def streams(self, body: dict[str, Any], path: str) -> bool:
        """The call asks for a stream (``body``: the managed body; ``path``: upstream's)."""
        return bool(body.get("stream"))

    # --- the managed request -----------------------------------------------------------

    @abstractmethod
    def upstream_body(
        self, converted: Converted, built: dict[str, Any], *, final: bool
    ) -> dict[str, Any]:
        """The client's fields with its instructions, messages and tools replaced by the
        managed context (``built``); on a final turn the tools are the final-report tool."""

    def streaming_body(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The body of a streamed call, and whether the proxy asked for its usage chunk
        (then not the client's to see)."""
        return body, False

    # --- the reply -----------------------------------------------------------------

    @abstractmethod
    def reply_from_response(self, response: dict[str, Any]) -> Reply: ...

    @abstractmethod
    def stream(self) -> Accumulator:
        """A fresh accumulator of one upstream stream."""

    @abstractmethod
    def stream_filter(
        self, runnable: frozenset[str], final: str | None, *, strip_usage: bool
    ) -> StreamFilter | None:
        """The filter a stream goes through (None: upstream's bytes go out as they come)."""

    @abstractmethod
    def client_message(self, reply: Reply, response: dict[str, Any] | None) -> dict[str, Any]:
        """The reply as the client will send it back in its history (for its fingerprint)."""

    @abstractmethod
    def final_as_text(self, response: dict[str, Any], name: str) -> dict[str, Any]:
        """A whole response with its final-report call ``name`` as the answer's text."""

    def noted_content(self, content: Any) -> Any:
        """A message's content ready for the round-limit note to be added to it."""
        return content

    @abstractmethod
    def strip_calls(self, response: dict[str, Any], names: set[str]) -> dict[str, Any]:
        """A whole response without its calls of the tools ``names`` (the built-ins)."""

    @abstractmethod
    def with_note(self, response: dict[str, Any], note: str) -> dict[str, Any]:
        """A whole response with the round-limit note at the end of its answer."""

    # --- errors ----------------------------------------------------------------------

    @abstractmethod
    def error_body(self, status: int, message: str, kind: str | None = None) -> dict[str, Any]:
        """The provider's own error shape, so its SDK raises its usual exception."""

    @abstractmethod
    def error_event(self, error: dict[str, Any]) -> bytes:
        """An error inside a stream that has started, in the provider's stream form."""

    @abstractmethod
    def is_overflow(self, status: int, body: Any) -> bool:
        """Upstream said the prompt does not fit the model's window
        (docs/concepts/compaction.md#overflow)."""

    @abstractmethod
    def reported_window(self, body: Any) -> int | None:
        """The window upstream says the model has, from its "too long" message (None if unsaid)."""

    @abstractmethod
    def reported_size(self, body: Any) -> int | None:
        """The request's size upstream counted, from its "too long" message (None if unsaid)."""

    # --- credentials and upstream ----------------------------------------------------------

    def provider_key(self, headers: Mapping[str, str]) -> str | None:
        """The provider key the client sent."""
        return bearer_or_api_key(headers)

    @abstractmethod
    def upstream_headers(self, headers: Mapping[str, str], key: str | None) -> dict[str, str]:
        """The headers sent upstream: the client's that go on, and the key (``key``)."""

    def upstream_url(self, path: str) -> str:
        """Upstream's URL of the client's ``path`` (the API's version path in between)."""
        return f"{getattr(settings, self.url_setting)}{self.version_path}{path}"

    def upstream_setting(self) -> str:
        """The setting that names upstream (error messages name it with the host)."""
        return self.url_setting

    def managed_key(self) -> str | None:
        """The server's own key for this provider (managed credentials), if set."""
        return getattr(settings, self.key_setting)

    def managed_key_setting(self) -> str:
        return self.key_setting


_REGISTRY: dict[str, Dialect] = {}


def register(dialect: Dialect) -> Dialect:
    """``dialect`` under its name in the registry (once)."""
    if dialect.name in _REGISTRY:
        raise ValueError(f"provider API {dialect.name!r} is registered already")
    _REGISTRY[dialect.name] = dialect
    return dialect


def registered(name: str) -> Dialect:
    """The provider API registered as ``name`` (``KeyError`` if none)."""
    return _REGISTRY[name]


def all_registered() -> tuple[Dialect, ...]:
    return tuple(_REGISTRY.values())


def serving(path: str, default: Dialect) -> Dialect:
    """The provider API whose routes hold ``path``, for what is said before a route runs
    (a body over the limit, an unknown path): the first registered (those sharing a
    prefix share their error shape), ``default`` when none."""
    for dialect in _REGISTRY.values():
        if path.startswith(dialect.path_prefix):
            return dialect
    return default


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


def replaced_body(
    converted: Converted,
    built: dict[str, Any],
    *,
    final: bool,
    system: bool,
    add_extra: Callable[[dict[str, Any], dict[str, Any]], None],
) -> dict[str, Any]:
    """A messages-shaped body (Messages, Chat Completions): the client's fields with
    ``system`` (when ``system`` and built), messages and tools the managed context's.

    ``add_extra`` puts back on a managed tool what the client sent beside its
    schema (``Converted.tool_extras``). On a final turn the tools are the
    final-report tool alone (docs/concepts/guard.md#final-turn), so the
    client's ``tool_choice`` is dropped with its tools.
    """
    body = dict(converted.rest)
    if system and built.get("system"):
        body["system"] = built["system"]
    body["messages"] = built["messages"]
    place_tools(body, built, converted, final=final, add_extra=add_extra)
    return body


def place_tools(
    body: dict[str, Any],
    built: dict[str, Any],
    converted: Converted,
    *,
    final: bool,
    add_extra: Callable[[dict[str, Any], dict[str, Any]], None],
) -> None:
    """The managed tools on ``body`` (``replaced_body``'s rule, every API's): each with
    the client's extras, then the client's other tools, unless the turn is final;
    no tools, no ``tool_choice``."""
    tools = list(built.get("tools") or ())
    for tool in tools:
        extra = converted.tool_extras.get(_tool_name(tool))
        if extra:
            add_extra(tool, extra)
    if final:
        body.pop("tool_choice", None)
    else:
        tools.extend(converted.other_tools)
    if tools:
        body["tools"] = tools
    else:
        body.pop("tool_choice", None)
        body.pop("tools", None)


def _tool_name(tool: dict[str, Any]) -> str:
    return tool.get("name") or (tool.get("function") or {}).get("name", "")
