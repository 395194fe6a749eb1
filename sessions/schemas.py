"""API schemas for sessions. Inputs forbid unknown fields (a typo is a 422,
not a silently ignored setting)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.strategies.chain import validate_chain
from contextsvc.engine.summarize import SUMMARIZERS

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$"
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"
SECTION_KINDS = ("base", "rules", "memory", "skill", "scratchpad", "status")
TOOL_CATEGORIES = ("builtin", "mcp", "skill")

# Bounds on numbers (documented in the README): each fits its column
# (PositiveIntegerField: 2**31 - 1) with room for the sums the service stores,
# and is far beyond any real model; a policy number past them would be stored
# and then break every later call on the session.
MAX_TOKENS = 100_000_000  # windows, output limits, buffers, token counts
MAX_SEQ = 2**31 - 1  # message seqs and line numbers (integer columns)
MAX_ID = 2**63 - 1  # list cursors (bigint ids)
MAX_TURNS = 10_000  # turns / tool uses / messages a policy keeps
MAX_PROMPT_CHARS = 100_000  # a policy prompt or directive
MAX_LIST_ITEMS = 100  # directives, chain names, extra targets, excluded tools
# Free-form JSON (tool arguments, content parts, input schemas) nests at most
# this deep: the stored JSON is later rendered inside the context body, and
# the renderer (orjson) stops at 255 levels, which would make a 500 of every
# later context call.
MAX_JSON_DEPTH = 64


def check_depth(value: Any) -> Any:
    """``value`` unchanged, or a ValueError when it nests deeper than MAX_JSON_DEPTH."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)
    return value


class In(BaseModel):
    # Plain pydantic, not ninja.Schema: inputs are never read off ORM objects,
    # and Schema's wrap validator for that costs on every message of a batch.
    model_config = ConfigDict(extra="forbid")


# --- policy ---------------------------------------------------------------------


class CompactionPolicy(In):
    enabled: bool = True
    auto: bool = True
    threshold_ratio: float | None = Field(None, gt=0, le=1)
    model: str | None = Field(None, min_length=1, max_length=200)
    # Who writes this session's summaries (CONTEXTSVC_SUMMARIZER when unset).
    summarizer: str | None = Field(None, max_length=50)
    strategy: str | None = Field(None, max_length=50)
    chain: list[str] | None = Field(None, min_length=1, max_length=MAX_LIST_ITEMS)
    summary_prompt: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    summary_directives: list[str] = Field([], max_length=MAX_LIST_ITEMS)
    retain_prompt: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    retain_directives: list[str] = Field([], max_length=MAX_LIST_ITEMS)
    retain_last_turns: int = Field(1, ge=0, le=MAX_TURNS)
    compression_prompt: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    preserve_top: int = Field(5, ge=0, le=MAX_TURNS)
    preserve_bottom: int = Field(5, ge=0, le=MAX_TURNS)
    sandwich_threshold: float = Field(0.7, gt=0, le=1)
    keep_tool_uses: int = Field(3, ge=0, le=MAX_TURNS)
    exclude_tools: list[str] = Field([], max_length=1000)
    clear_at_least: int = Field(0, ge=0, le=MAX_TOKENS)
    clear_tool_inputs: bool = False

    @field_validator("summary_directives", "retain_directives", "exclude_tools")
    @classmethod
    def _short_items(cls, value: list[str]) -> list[str]:
        for i, item in enumerate(value):
            if len(item) > MAX_PROMPT_CHARS:
                raise ValueError(f"item {i} is longer than {MAX_PROMPT_CHARS} characters")
        return value

    # A name the engine does not know would be stored and fail every later
    # compaction; refused here, naming the field.
    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str | None) -> str | None:
        if value is not None and value != "chain":
            _check_chain([value])
        return value

    @field_validator("summarizer")
    @classmethod
    def _known_summarizer(cls, value: str | None) -> str | None:
        if value is not None and value not in SUMMARIZERS:
            raise ValueError(
                f"unknown summarizer {value!r}; expected one of {', '.join(SUMMARIZERS)}"
            )
        return value

    @field_validator("chain")
    @classmethod
    def _known_chain(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            _check_chain(value)
        return value


def _check_chain(names: list[str]) -> None:
    try:
        validate_chain(names)  # the engine's own list, so the two cannot drift apart
    except EngineValidationError as exc:
        raise ValueError(exc.message) from None


class ToolOutputCachePolicy(In):
    enabled: bool = True
    preset: Literal["default", "offload", "tool_response"] | None = None
    context_budget_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS)
    max_message_bytes: int = Field(50 * 1024, gt=0, le=16 * 1024 * 1024)
    max_line_length: int = Field(2000, gt=0, le=1_000_000)
    trim_hysteresis: float = Field(0.25, ge=0, lt=1)


class ThresholdsPolicy(In):
    compact_at: float = Field(0.95, gt=0, le=1)
    block_at: float = Field(0.98, gt=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> ThresholdsPolicy:
        if not self.compact_at < self.block_at:
            raise ValueError("thresholds.compact_at must be below thresholds.block_at")
        return self


class EstimatePolicy(In):
    # Multipliers of every message / image / tool schema: kept small so that
    # a 32 MiB body's count still fits the integer token columns.
    per_message_overhead: int = Field(4, ge=0, le=1_000)
    media_item_tokens: int = Field(1600, ge=0, le=100_000)
    tool_schema_scale: float = Field(2.09, gt=0, le=10)


class PromptCachePolicy(In):
    """Prompt caching (spec 002 §4): where ``cache_control`` markers go."""

    enabled: bool = True
    # Anthropic cache lifetimes: writes cost 1.25× input for 5 min, 2× for 1 h.
    ttl: Literal["5m", "1h"] = "5m"
    # The moving breakpoint on the newest history block.
    history_breakpoint: bool = True
    mark_tools: bool = True
    max_breakpoints: int = Field(4, ge=1, le=4)
    # Overrides the model profile's minimum cacheable prefix.
    min_cacheable_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)


class TargetIn(In):
    provider: str = Field(..., min_length=1, max_length=50)
    model: str = Field(..., min_length=1, max_length=200)
    context_window: int | None = Field(None, le=MAX_TOKENS)
    max_output_tokens: int | None = Field(None, le=MAX_TOKENS)
    buffer_tokens: int | None = Field(None, le=MAX_TOKENS)


class ProxyPolicy(In):
    """The drop-in proxy (``proxy/``): whether it runs the built-in tools for the model itself."""

    builtin_tools: bool = True
    # The client defers its own tools (a tool-search tool, ``defer_loading``):
    # the service's deferral stays off. The proxy sets it when it sees one.
    client_tool_search: bool | None = None


class PolicyIn(In):
    compaction: CompactionPolicy | None = None
    tool_output_cache: ToolOutputCachePolicy | None = None
    thresholds: ThresholdsPolicy | None = None
    estimate: EstimatePolicy | None = None
    # Further provider targets the agent may fall back to (spec 001 ok/skip/final).
    targets: list[TargetIn] | None = Field(None, max_length=MAX_LIST_ITEMS)
    final_report_tool: str | None = Field(None, pattern=TOOL_NAME_PATTERN)
    tool_deferral_threshold: float | None = Field(None, gt=0, le=1)
    prompt_cache: PromptCachePolicy | None = None
    proxy: ProxyPolicy | None = None


# --- sessions ---------------------------------------------------------------------


class SessionCreateIn(In):
    id: str | None = Field(None, pattern=ID_PATTERN)
    agent: str = Field("", max_length=100)
    model: str = Field(..., min_length=1, max_length=200)
    provider: str | None = Field(None, max_length=50)
    # No gt=0 here: the engine answers spec 004's exact message for <= 0.
    context_window: int | None = Field(None, le=MAX_TOKENS)
    max_output_tokens: int | None = Field(None, le=MAX_TOKENS)
    buffer_tokens: int | None = Field(None, le=MAX_TOKENS)
    tokenizer: str | None = Field(None, max_length=100)
    policy: PolicyIn = PolicyIn()


class SessionPatchIn(In):
    agent: str | None = Field(None, max_length=100)
    model: str | None = Field(None, min_length=1, max_length=200)
    provider: str | None = Field(None, max_length=50)
    context_window: int | None = Field(None, le=MAX_TOKENS)
    max_output_tokens: int | None = Field(None, le=MAX_TOKENS)
    buffer_tokens: int | None = Field(None, le=MAX_TOKENS)
    tokenizer: str | None = Field(None, max_length=100)
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
    # spec 002 §4 order: base, rules (AGENT.md), memory, skill, scratchpad, status.
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
    category: Literal["builtin", "mcp", "skill"] = "mcp"

    _shallow_schema = field_validator("input_schema")(check_depth)

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

    _shallow_arguments = field_validator("arguments")(check_depth)


class MessageIn(In):
    role: Literal["user", "assistant", "tool", "system"]
    content: str | list[dict[str, Any]] = ""
    tool_calls: list[ToolCallIn] = []
    tool_call_id: str | None = Field(None, max_length=200)
    name: str | None = Field(None, max_length=200)
    reasoning: str | None = None
    output_ref: str | None = Field(None, max_length=64)

    @field_validator("content")
    @classmethod
    def _parts_have_types(cls, value: Any) -> Any:
        if isinstance(value, list):
            for i, part in enumerate(value):
                if not isinstance(part.get("type"), str):
                    raise ValueError(f"content[{i}] needs a string 'type'")
                if part["type"] == "text" and not isinstance(part.get("text"), str):
                    raise ValueError(f"content[{i}] of type text needs a string 'text'")
            check_depth(value)
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
NATIVE_FORMATS = ("anthropic", "openai", "responses")


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
