"""Chat Completions as a provider API of the proxy (``/proxy/openai/v1/chat/completions``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from contextsvc.engine.providers import openai_chat
from contextsvc.engine.providers.common import Converted, Reply
from contextsvc.engine.providers.sse import OpenAIStream

from .. import gate_fields as f
from ..streaming import UsageStrip
from .anthropic import forwarded_headers
from .base import ToTranscript, register, replaced_body
from .openai_common import OpenAIVendor
from .openai_fields import chat_messages, chat_tools
from .openai_stream import OpenAIFilter
from .report import report_text, with_text


def _add_extra(tool: dict[str, Any], extra: dict[str, Any]) -> None:
    tool["function"].update(extra.get("function", {}))
    tool.update(extra.get("tool", {}))


class ChatCompletions(OpenAIVendor):
    name = "openai"
    output_limit_hint = "lower max_completion_tokens (or max_tokens; e.g. {suggest})"
    fmt = "openai"
    messages_key = "messages"

    def convert(self, body: dict[str, Any], *, messages: bool = True) -> Converted:
        return openai_chat.request_to_transcript(body, messages=messages)

    def check_body(self, body: dict[str, Any]) -> None:
        f.envelope(body, ("tools", "messages"), ("max_tokens", "max_completion_tokens"))
        if body.get("tools") is not None:
            chat_tools(body["tools"])
        chat_messages(f.leading(body.get("messages"), "messages"))

    def check_messages(self, messages: list[Any], base: int) -> None:
        chat_messages(messages, base)

    def output_key(self, parent: dict[str, Any]) -> str | None:
        return "content" if parent.get("role") == "tool" else None

    def client_messages(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Without the leading system messages: those are sections, not history."""
        messages = body["messages"]
        lead = 0
        while lead < len(messages) and messages[lead].get("role") in openai_chat.INSTRUCTION_ROLES:
            lead += 1
        return messages[lead:]

    def instructions(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> Any:
        return body["messages"][: len(body["messages"]) - len(messages)]

    def to_transcript(
        self,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        open_calls: Mapping[str, str] | None = None,
    ) -> ToTranscript:
        # The slices' offsets count from the first message after the leading system ones.
        lead = len(body.get("messages") or ()) - len(messages)

        def convert(part: list[dict[str, Any]], offset: int) -> list[dict[str, Any]]:
            self.check_messages(part, lead + offset)
            return openai_chat.messages_to_transcript(part, offset=lead + offset)

        return convert

    def upstream_body(
        self, converted: Converted, built: dict[str, Any], *, final: bool
    ) -> dict[str, Any]:
        return replaced_body(converted, built, final=final, system=False, add_extra=_add_extra)

    def streaming_body(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if "stream_options" in body:
            return body, False
        # The usage arrives in a last chunk only when asked for; a client that
        # set stream_options gets what it asked for, nothing added.
        return {**body, "stream_options": {"include_usage": True}}, True

    def reply_from_response(self, response: dict[str, Any]) -> Reply:
        return openai_chat.reply_from_response(response)

    def stream(self) -> OpenAIStream:
        return OpenAIStream()

    def stream_filter(
        self, runnable: frozenset[str], final: str | None, *, strip_usage: bool
    ) -> OpenAIFilter | UsageStrip | None:
        if not runnable and not final:
            return UsageStrip() if strip_usage else None
        return OpenAIFilter(runnable, final, strip_usage=strip_usage)

    def client_message(self, reply: Reply, response: dict[str, Any] | None) -> dict[str, Any]:
        if response is not None:
            choices = response.get("choices") or [{}]
            message = dict(choices[0].get("message") or {})
            message.setdefault("role", "assistant")
            return message
        return openai_chat.messages_from_transcript([reply.message])[0]

    def final_as_text(self, response: dict[str, Any], name: str) -> dict[str, Any]:
        return openai_as_text(response, name)

    def strip_calls(self, response: dict[str, Any], names: set[str]) -> dict[str, Any]:
        return strip_openai(response, names)

    def with_note(self, response: dict[str, Any], note: str) -> dict[str, Any]:
        return chat_with_note(response, note)

    def error_event(self, error: dict[str, Any]) -> bytes:
        return f"data: {json.dumps({'error': error})}\n\n".encode()

    def upstream_headers(self, headers: Mapping[str, str], key: str | None) -> dict[str, str]:
        out = forwarded_headers(headers)
        if key:
            out["authorization"] = f"Bearer {key}"
        return out


OPENAI = register(ChatCompletions())


# --- the answer edited for the client -----------------------------------------


def strip_openai(response: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """A chat completion without the tool calls of the given tools."""
    choices = []
    for choice in response.get("choices") or ():
        message = dict(choice.get("message") or {})
        calls = [
            c
            for c in message.get("tool_calls") or ()
            if (c.get("function") or {}).get("name") not in names
        ]
        if message.get("tool_calls") is not None:
            message["tool_calls"] = calls or None
        choices.append({**choice, "message": message})
    return {**response, "choices": choices}


def chat_with_note(response: dict[str, Any], note: str) -> dict[str, Any]:
    """A chat completion with the round-limit note at the end of its message's text, and
    the finish reason of an answer."""
    choices = []
    for choice in response.get("choices") or ():
        message = dict(choice.get("message") or {})
        message["content"] = with_text(message.get("content"), note)
        choice = {**choice, "message": message}
        if not message.get("tool_calls") and choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
        choices.append(choice)
    return {**response, "choices": choices}


def openai_as_text(response: dict[str, Any], name: str) -> dict[str, Any]:
    """A chat completion with its tool calls of ``name`` turned into the message's text."""
    choices = []
    for choice in response.get("choices") or ():
        message = dict(choice.get("message") or {})
        calls = message.get("tool_calls") or []
        finals = [c for c in calls if (c.get("function") or {}).get("name") == name]
        if finals:
            rest = [c for c in calls if c not in finals]
            message["tool_calls"] = rest or None
            for call in finals:
                text = report_text((call.get("function") or {}).get("arguments"))
                message["content"] = with_text(message.get("content"), text)
            choice = {**choice, "message": message}
            if not rest and choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
        choices.append(choice)
    return {**response, "choices": choices}
