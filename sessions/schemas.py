"""API schemas for sessions. Inputs forbid unknown fields (a typo is a 422,
not a silently ignored setting). Shared bounds live in ``schemas_base``, the
policy in ``schemas_policy``."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .schemas_base import (
    ID_PATTERN,
    KNOWN_TOKENIZER,
    MAX_SEARCH_HINT_CHARS,
    MAX_SEQ,
    MAX_TOKENS,
    MAX_TURNS,
    NOT_NEGATIVE,
    POSITIVE,
    SECTION_KINDS,
    TOOL_CATEGORIES,
    TOOL_NAME_PATTERN,
    In,
    check_json,
    exactly_one_of,
)
from .schemas_policy import PolicyIn

# --- sessions ---------------------------------------------------------------------


class SessionCreateIn(In):
    id: str | None = Field(None, pattern=ID_PATTERN)
    agent: str = Field("", max_length=100)
    model: str = Field(..., min_length=1, max_length=200)
    provider: str | None = Field(None, max_length=50)
    # No gt=0 here: the engine answers the exact message
    # (docs/concepts/context-build.md#limit-validation) for <= 0 (the schema declares the bound all
    # the same).
    context_window: int | None = Field(None, le=MAX_TOKENS, json_schema_extra=POSITIVE)
    max_output_tokens: int | None = Field(None, le=MAX_TOKENS, json_schema_extra=NOT_NEGATIVE)
    buffer_tokens: int | None = Field(None, le=MAX_TOKENS, json_schema_extra=NOT_NEGATIVE)
    tokenizer: str | None = Field(None, max_length=100, json_schema_extra=KNOWN_TOKENIZER)
    policy: PolicyIn = PolicyIn()


class SessionPatchIn(In):
    agent: str | None = Field(None, max_length=100)
    model: str | None = Field(None, min_length=1, max_length=200)
    provider: str | None = Field(None, max_length=50)
    context_window: int | None = Field(None, le=MAX_TOKENS, json_schema_extra=POSITIVE)
    max_output_tokens: int | None = Field(None, le=MAX_TOKENS, json_schema_extra=NOT_NEGATIVE)
    buffer_tokens: int | None = Field(None, le=MAX_TOKENS, json_schema_extra=NOT_NEGATIVE)
    tokenizer: str | None = Field(None, max_length=100, json_schema_extra=KNOWN_TOKENIZER)
    policy: PolicyIn | None = None


def _named(data: Any, field: str, allowed: tuple[str, ...], what: str) -> None:
    """Reject an unknown enum value with a message naming the item, so a bad list is fixed in one go."""
    if isinstance(data, dict) and field in data and data[field] not in allowed:
        raise ValueError(
            f"{what} {data.get('name')!r}: unknown {field} {data[field]!r};"
            f" expected one of {', '.join(allowed)}"
        )


class SectionIn(In):
    name: str = Field(..., min_length=1, max_length=100)
    content: str
    cacheable: bool = True
    # docs/concepts/caching.md#section-order: base, rules (AGENT.md), memory, skill, scratchpad,
    # status.
    kind: Literal["base", "rules", "memory", "skill", "scratchpad", "status"] = "base"

    @model_validator(mode="before")
    @classmethod
    def _known_kind(cls, data: Any) -> Any:
        _named(data, "kind", SECTION_KINDS, "section")
        return data


class ToolDefIn(In):
    name: str = Field(..., pattern=TOOL_NAME_PATTERN)
    description: str = ""
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    category: Literal["builtin", "mcp", "skill", "client"] = "mcp"
    # Keywords tool_search matches (docs/concepts/deferral.md#tool-search): what the tool is for in
    # the words a model would search with; never sent to the model.
    search_hint: str = Field("", max_length=MAX_SEARCH_HINT_CHARS)

    _shallow_schema = field_validator("input_schema")(check_json)

    @model_validator(mode="before")
    @classmethod
    def _known_category(cls, data: Any) -> Any:
        _named(data, "category", TOOL_CATEGORIES, "tool")
        return data


# --- messages ---------------------------------------------------------------------


class ToolCallIn(In):
    id: str = Field(..., min_length=1, max_length=200)
    name: str = Field(..., min_length=1, max_length=200)
    arguments: dict[str, Any] = {}

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments_from_json_text(cls, value: Any) -> Any:
        # OpenAI hands arguments over as JSON text; keep what is not JSON.
        if isinstance(value, str):
            try:
                parsed = json.loads(value) if value.strip() else {}
            except (json.JSONDecodeError, RecursionError):
                return {"_raw": value}
            return parsed if isinstance(parsed, dict) else {"_value": parsed}
        return value

    _shallow_arguments = field_validator("arguments")(check_json)


class MessageIn(In):
    role: Literal["user", "assistant", "tool", "system"]
    content: str | list[dict[str, Any]] = ""
    tool_calls: list[ToolCallIn] = []
    tool_call_id: str | None = Field(None, max_length=200)
    name: str | None = Field(None, max_length=200)
    reasoning: str | None = None
    output_ref: str | None = Field(None, max_length=64)
    # Keep it verbatim through every compaction (above the summary, never cleared).
    pinned: bool = False

    @field_validator("content")
    @classmethod
    def _parts_have_types(cls, value: Any) -> Any:
        if isinstance(value, list):
            for i, part in enumerate(value):
                if not isinstance(part.get("type"), str):
                    raise ValueError(f"content[{i}] needs a string 'type'")
                if part["type"] == "text" and not isinstance(part.get("text"), str):
                    raise ValueError(f"content[{i}] of type text needs a string 'text'")
            check_json(value)
        return value

    @model_validator(mode="after")
    def _role_rules(self) -> MessageIn:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.role != "tool" and self.tool_call_id:
            raise ValueError("tool_call_id is only for tool messages")
        if self.role != "assistant" and self.tool_calls:
            raise ValueError("tool_calls are only for assistant messages")
        if self.role != "tool" and self.output_ref:
            raise ValueError("output_ref is only for tool messages")
        # A repeated tool-call id (in a message, a batch or the session) is
        # refused by the append service, which names messages.N.tool_calls.M.id.
        return self


# ``?format=`` of POST /messages: the agent's own provider shape instead of MessageIn.
NATIVE_FORMATS = ("anthropic", "openai", "responses", "gemini")


class AppendIn(In):
    messages: list[MessageIn]

    @model_validator(mode="wrap")
    @classmethod
    def _native(cls, data: Any, handler: Any, info: ValidationInfo) -> Any:
        # ninja validates the body before the handler sees ``?format=``; with a
        # native format the list is left to the provider converters
        # (``sessions.services.native``), which name the field in the agent's shape.
        request = (info.context or {}).get("request")
        fmt = request.GET.get("format") if request is not None else None
        if fmt not in NATIVE_FORMATS:
            return handler(data)
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise ValueError("messages: a list of messages in the named format is required")
        unknown = set(data) - {"messages"}
        if unknown:
            raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
        return cls.model_construct(messages=data["messages"])


class RetractIn(In):
    """Exactly one of ``last`` (the last N live messages) or ``from_seq`` (every live
    message from that seq on); the service names the field when both or neither come."""

    # The view checks it (naming the field); the schema says so.
    model_config = ConfigDict(json_schema_extra=exactly_one_of(last="integer", from_seq="integer"))

    last: int | None = Field(None, ge=1, le=MAX_TURNS)
    from_seq: int | None = Field(None, ge=1, le=MAX_SEQ)


class UsageIn(In):
    # Each at most MAX_TOKENS, so their sum (total_tokens) fits its column.
    input_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    cache_creation_tokens: int = Field(
        0,
        ge=0,
        le=MAX_TOKENS,
        validation_alias=AliasChoices("cache_creation_tokens", "cache_creation_input_tokens"),
    )
    cache_read_tokens: int = Field(
        0,
        ge=0,
        le=MAX_TOKENS,
        validation_alias=AliasChoices("cache_read_tokens", "cache_read_input_tokens"),
    )
    # The last message the reported call covered; default: the newest one.
    through_seq: int | None = Field(None, ge=0, le=MAX_SEQ)
