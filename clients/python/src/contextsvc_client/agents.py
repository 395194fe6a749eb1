"""OpenAI Agents SDK session backed by contextsvc (needs ``openai-agents``: the ``agents`` extra).

:class:`ContextsvcSession` implements the SDK's ``Session`` protocol on a
service session, in the SDK's own item shape (Responses input items, posted
and read with ``format=responses``: the service converts, once, on its side):

- ``get_items`` is the managed history (the live window as the service
  builds it: compacted, long outputs trimmed), not the raw transcript;
- ``add_items`` posts each batch with an Idempotency-Key, after reporting the
  usage of the model calls the run made since the last batch (``/usage``);
- ``pop_item`` retracts the newest item (the transcript keeps it, marked); a
  tool output goes with its call (the service keeps exchanges whole);
- ``clear_session`` deletes the service session and creates it again, empty,
  with the same settings;
- ``run_compaction`` compacts on the service when asked to (``force`` or a
  direct call); the SDK's per-turn calls leave the timing to the service.

The SDK reads a session once per run; the tool loop inside a run grows its
own list. :func:`call_model_input_filter` makes every model call of a run
send the service's managed context instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from agents import Agent, FunctionTool, RunConfig
from agents.memory import SessionSettings
from agents.run_config import CallModelData, ModelInputData

from .aio import AsyncClient, AsyncSession
from .errors import NotFoundError, ValidationError

Item = dict[str, Any]
# The service session's creation fields kept across clear_session.
_CREATE_FIELDS = (
    "agent",
    "model",
    "provider",
    "context_window",
    "max_output_tokens",
    "buffer_tokens",
    "tokenizer",
    "policy",
)


def _plain(item: Any) -> Item:
    """An SDK input item as JSON-ready dict (the SDK hands dicts, sometimes pydantic models)."""
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if dump is None:
        raise TypeError(f"not a Responses input item: {item!r}")
    return dump(exclude_unset=True, mode="json")


def _answered(items: list[Item]) -> list[Item]:
    """``items`` less the function calls whose output is not among them.

    The service never sends a call without its result (the context would show
    a placeholder result): a popped output takes its call along.
    """
    outputs = {i.get("call_id") for i in items if i.get("type") == "function_call_output"}
    return [i for i in items if i.get("type") != "function_call" or i.get("call_id") in outputs]


class ContextsvcSession:
    """An Agents SDK ``Session`` whose history lives in a contextsvc session.

    ``ContextsvcSession("run-42", client=AsyncClient(url, key))`` for a session
    that exists; :meth:`create` makes one. Pass it to ``Runner.run(...,
    session=...)`` with ``run_config=session.run_config()`` so every model
    call of the run sends the managed context.
    """

    def __init__(
        self,
        session_id: str,
        *,
        client: AsyncClient,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.client = client
        self.service: AsyncSession = client.session(session_id)
        self._synced: str | None = None  # fingerprint of the instructions and tools sent
        self._usage: Any = None  # the run's Usage object last seen
        self._usage_reported = 0  # how many of its per-request entries went to /usage

    @classmethod
    async def create(
        cls,
        client: AsyncClient,
        model: str,
        *,
        session_id: str | None = None,
        session_settings: SessionSettings | None = None,
        **fields: Any,
    ) -> ContextsvcSession:
        """A new service session (``fields``: context_window, policy …, as ``create_session``)."""
        created = await client.create_session(model, id=session_id, **fields)
        return cls(created.id, client=client, session_settings=session_settings)

    # --- the Session protocol ---------------------------------------------------------
    # Each takes ``wrapper`` (the run's context): the SDK then passes it, and
    # add_items reads the run's per-request usage from it.

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Item]:
        body = await self.service.context("responses")
        # An empty live window still builds a request with one marked user line
        # (every request the service builds has a user turn); the session itself
        # holds no items then, which is what the SDK's protocol asks for.
        empty = not body["budget"]["components"]["conversation"]
        items: list[Item] = [] if empty else body["input"]
        if limit is not None:
            return items[-limit:] if limit > 0 else []
        return items

    async def add_items(self, items: Sequence[Any], *, wrapper: Any = None) -> None:
        # Usage first: the report then covers the messages the call was sent.
        await self._report_usage(wrapper)
        if items:
            await self.service.append([_plain(i) for i in items], format="responses")

    async def pop_item(self, *, wrapper: Any = None) -> Item | None:
        before = await self.get_items()
        if not before:
            return None
        try:
            await self.service.retract(last=1)
        except ValidationError as exc:
            # A tool result goes only with the call that asked for it (the service
            # keeps every exchange whole): take the exchange, give the rest back.
            details = exc.details if isinstance(exc.details, dict) else {}
            if details.get("from_seq") is None:
                raise
            await self.service.retract(from_seq=details["from_seq"])
        after = await self.get_items()
        removed = before[len(after) :]
        if len(removed) > 1:
            kept = _answered(removed[:-1])
            if kept:
                await self.service.append(kept, format="responses")
        return removed[-1] if removed else None

    async def clear_session(self, *, wrapper: Any = None) -> None:
        try:
            data = await self.service.refresh()
        except NotFoundError:
            return
        await self.service.delete()
        fields = {k: data.get(k) for k in _CREATE_FIELDS if data.get(k) not in (None, "", {})}
        model = fields.pop("model")
        created = await self.client.create_session(model, id=self.session_id, **fields)
        self.service.data = created.data
        self._synced = None

    async def run_compaction(self, args: dict[str, Any] | None = None) -> None:
        """Compact now when asked (a direct call, or the SDK's ``force``).

        The SDK calls this after every turn; the service already compacts by
        its own thresholds (in the background, or in the request when the
        window is full), so those calls change nothing.
        """
        if args is None or args.get("force"):
            await self.service.compact(wait=True)

    # --- beyond the protocol ---------------------------------------------------------------

    def run_config(self, **kwargs: Any) -> RunConfig:
        """A ``RunConfig`` whose model calls all send the managed context."""
        return RunConfig(call_model_input_filter=call_model_input_filter(self), **kwargs)

    async def managed_input(self, data: CallModelData[Any]) -> ModelInputData:
        """The model input for one call: the service's context for this session."""
        await self._sync_agent(data.agent, data.model_data.instructions)
        body = await self.service.context("responses", purpose="call")
        instructions = body.get("instructions") or data.model_data.instructions
        return ModelInputData(input=body["input"], instructions=instructions)

    async def report_usage(self, usage: Any) -> None:
        """Post one request's usage (an SDK ``RequestUsage`` or ``Usage``) to ``/usage``."""
        details = getattr(usage, "input_tokens_details", None)
        await self.service.usage(
            usage.input_tokens,
            usage.output_tokens,
            cache_read_tokens=getattr(details, "cached_tokens", 0) or 0,
        )

    async def _report_usage(self, wrapper: Any) -> None:
        usage = getattr(wrapper, "usage", None)
        if usage is None:
            return
        if usage is not self._usage:  # a new run: its own Usage object
            self._usage, self._usage_reported = usage, 0
        entries = getattr(usage, "request_usage_entries", None) or []
        for entry in entries[self._usage_reported :]:
            await self.report_usage(entry)
        self._usage_reported = len(entries)

    async def _sync_agent(self, agent: Agent[Any], instructions: str | None) -> None:
        """Give the service the agent's instructions and function tools, so it counts them."""
        tools = [
            {
                "name": tool.name,
                "description": tool.description or "",
                "input_schema": tool.params_json_schema or {"type": "object"},
            }
            for tool in agent.tools
            if isinstance(tool, FunctionTool)
        ]
        sections = [{"name": "instructions", "content": instructions}] if instructions else []
        state = json.dumps([sections, tools], sort_keys=True)
        fingerprint = hashlib.sha256(state.encode()).hexdigest()
        if fingerprint == self._synced:
            return
        await self.service.set_system(sections)
        await self.service.set_tools(tools)
        self._synced = fingerprint


def call_model_input_filter(session: ContextsvcSession) -> Any:
    """``RunConfig(call_model_input_filter=...)`` for ``session``: each model call of a run
    sends the service's managed context (the SDK alone would send its growing list)."""

    async def _filter(data: CallModelData[Any]) -> ModelInputData:
        return await session.managed_input(data)

    return _filter
