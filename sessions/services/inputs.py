"""Typed shapes the session services take: the JSON the API's input schemas dump to.

TypedDicts, not dataclasses: sections, tools and messages are stored and
hashed as this very JSON (``Session.sections``, ``Session.tools``, the
Idempotency-Key fingerprint), so the services keep them as they come, with no
conversion on the append path. ``tests/sessions/test_service_inputs.py``
holds each one to its pydantic schema in ``sessions.schemas``.
"""

# No ``from __future__ import annotations`` here: TypedDict reads Required and
# NotRequired off the annotations at run time, which strings would hide.
from typing import Any, Literal, NotRequired, Required, TypedDict

# A session policy as POST/PATCH /sessions take it (``PolicyIn``); the services
# check it against that schema again, whoever calls them.
PolicyData = dict[str, Any]


class SessionCreateData(TypedDict, total=False):
    """A new session (``SessionCreateIn``): the model, and limits left out are resolved."""

    model: Required[str]
    id: str | None
    agent: str
    provider: str | None
    context_window: int | None
    max_output_tokens: int | None
    buffer_tokens: int | None
    tokenizer: str | None
    policy: PolicyData


class SessionPatchData(TypedDict, total=False):
    """A PATCH (``SessionPatchIn``): fields left out or None keep their values."""

    agent: str | None
    model: str | None
    provider: str | None
    context_window: int | None
    max_output_tokens: int | None
    buffer_tokens: int | None
    tokenizer: str | None
    policy: PolicyData | None


class SectionData(TypedDict):
    """A prompt section (``SectionIn``), stored as given in ``Session.sections``."""

    name: str
    content: str
    cacheable: NotRequired[bool]
    kind: NotRequired[Literal["base", "rules", "memory", "skill", "scratchpad", "status"]]


class ToolData(TypedDict):
    """A tool definition (``ToolDefIn``), stored as given in ``Session.tools``."""

    name: str
    input_schema: dict[str, Any]
    description: NotRequired[str]
    category: NotRequired[Literal["builtin", "mcp", "skill", "client"]]
    search_hint: NotRequired[str]


class ToolCallData(TypedDict):
    """A tool call of an assistant message (``ToolCallIn``)."""

    id: str
    name: str
    arguments: NotRequired[dict[str, Any]]


class MessageData(TypedDict, total=False):
    """A posted message (``MessageIn``)."""

    role: Required[Literal["user", "assistant", "tool", "system"]]
    content: str | list[dict[str, Any]]
    tool_calls: list[ToolCallData]
    tool_call_id: str | None
    name: str | None
    reasoning: str | None
    output_ref: str | None
    pinned: bool


class UsageData(TypedDict, total=False):
    """Reported usage of one LLM call (``UsageIn``); counts left out are 0."""

    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    through_seq: int | None
