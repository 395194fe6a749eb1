"""LangChain v1 agent middleware backed by contextsvc (needs ``langchain>=1``: the ``langchain`` extra).

``create_agent(model, tools, middleware=[ContextsvcMiddleware(session)])``:

- before each model call (``wrap_model_call``) the messages of the agent's
  state the service has not seen yet are posted (user input, tool results;
  a tool result larger than ``offload_bytes`` goes to the output store and
  is posted as its ``output_ref``), the system prompt and tools are given to
  the service when they change, and the request's messages, system prompt
  and tools are replaced by the service's managed context (``format=openai``:
  compacted history, trimmed outputs, the tools it selects among the agent's);
- after each model call (``after_model``) the provider's usage and the
  model's answer are posted.

Appends carry an Idempotency-Key made from the posted messages' ids, so a
retried or replayed step stores nothing twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.utils.function_calling import convert_to_openai_tool

from .client import Session

Json = dict[str, Any]
DEFAULT_OFFLOAD_BYTES = 16 * 1024


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def _tool_name(tool: Any) -> str | None:
    if isinstance(tool, dict):
        return (tool.get("function") or tool).get("name")
    return getattr(tool, "name", None)


class ContextsvcMiddleware(AgentMiddleware):
    """Keeps a LangChain agent's model calls inside the service session's managed context."""

    def __init__(self, session: Session, *, offload_bytes: int = DEFAULT_OFFLOAD_BYTES) -> None:
        super().__init__()
        self.session = session
        self.offload_bytes = offload_bytes
        self._posted: set[str] = set()  # ids of the state's messages the service has
        self._synced: str | None = None  # fingerprint of the system prompt and tools sent

    # --- hooks ---------------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self.managed_request(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        managed = await asyncio.to_thread(self.managed_request, request)
        return await handler(managed)

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        answer = messages[-1] if messages else None
        if isinstance(answer, AIMessage):
            self._report_usage(answer)
        self._post(messages)
        return None

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.after_model, state, runtime)

    # --- the managed request -------------------------------------------------------------

    def managed_request(self, request: ModelRequest) -> ModelRequest:
        """``request`` with the service's messages, system prompt and tools."""
        self._sync_prompt(request.system_prompt, request.tools)
        self._post(request.state.get("messages") or request.messages)
        body = self.session.context("openai", purpose="call")
        messages: list[AnyMessage] = list(convert_to_messages(body["messages"]))
        system = None
        if messages and isinstance(messages[0], SystemMessage):
            system = messages.pop(0)
        chosen = {(t.get("function") or t).get("name") for t in body.get("tools") or ()}
        # Only the agent's own tools (its tool node runs them), as the service chose them.
        tools = [t for t in request.tools if _tool_name(t) in chosen]
        return request.override(messages=messages, system_message=system, tools=tools)

    def _sync_prompt(self, system_prompt: str | None, tools: Sequence[Any]) -> None:
        specs = []
        for tool in tools:
            function = convert_to_openai_tool(tool).get("function")
            if function:
                specs.append(
                    {
                        "name": function["name"],
                        "description": function.get("description") or "",
                        "input_schema": function.get("parameters") or {"type": "object"},
                    }
                )
        sections = [{"name": "system", "content": system_prompt}] if system_prompt else []
        state = json.dumps([sections, specs], sort_keys=True)
        fingerprint = hashlib.sha256(state.encode()).hexdigest()
        if fingerprint != self._synced:
            self.session.set_system(sections)
            self.session.set_tools(specs)
            self._synced = fingerprint

    # --- posting ---------------------------------------------------------------------------

    def _post(self, messages: Sequence[BaseMessage]) -> None:
        new = [
            m
            for m in messages
            if m.id and m.id not in self._posted and not isinstance(m, SystemMessage)
        ]
        if not new:
            return
        batch = [self._service_message(m) for m in new]
        ids = "\n".join(m.id or "" for m in new)
        key = "lc-" + hashlib.sha256(f"{self.session.id}\n{ids}".encode()).hexdigest()[:40]
        self.session.append(batch, idempotency_key=key)
        self._posted.update(m.id for m in new if m.id)

    def _service_message(self, message: BaseMessage) -> Json:
        """One LangChain message in the service's own shape."""
        if isinstance(message, ToolMessage):
            out: Json = {"role": "tool", "tool_call_id": message.tool_call_id}
            if message.name:
                out["name"] = message.name
            text = _text(message.content)
            if len(text.encode()) > self.offload_bytes:
                upload = self.session.upload_output(text, tool_name=message.name or "")
                out["output_ref"] = upload["ref"]
            else:
                out["content"] = message.content
            return out
        if isinstance(message, AIMessage):
            out = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                out["tool_calls"] = [
                    {"id": c["id"], "name": c["name"], "arguments": c["args"]}
                    for c in message.tool_calls
                ]
            return out
        return {"role": "user", "content": message.content}

    def _report_usage(self, answer: AIMessage) -> None:
        usage = answer.usage_metadata
        if not usage:
            return
        details = usage.get("input_token_details") or {}
        self.session.usage(
            usage.get("input_tokens", 0),
            usage.get("output_tokens", 0),
            cache_creation_tokens=details.get("cache_creation", 0) or 0,
            cache_read_tokens=details.get("cache_read", 0) or 0,
        )
