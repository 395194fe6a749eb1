"""What every input schema shares: the bounds on numbers and ids, the JSON depth check, ``In``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from contextsvc import body_gate

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$"
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"
SECTION_KINDS = ("base", "rules", "memory", "skill", "scratchpad", "status")
TOOL_CATEGORIES = ("builtin", "mcp", "skill", "client")

# Bounds on numbers (documented in docs/api.md): each fits its column
# (PositiveIntegerField: 2**31 - 1) with room for the sums the service stores,
# and is far beyond any real model; a policy number past them would be stored
# and then break every later call on the session.
MAX_TOKENS = 100_000_000  # windows, output limits, buffers, token counts
MAX_SEQ = 2**31 - 1  # message seqs and line numbers (integer columns)
MAX_ID = 2**63 - 1  # list cursors (bigint ids)
MAX_TURNS = 10_000  # turns / tool uses / messages a policy keeps
MAX_PROMPT_CHARS = 100_000  # a policy prompt or directive
MAX_LIST_ITEMS = 100  # directives, chain names, extra targets, excluded tools
# Free-form JSON (tool arguments, content parts, input schemas): the gate's
# bounds (contextsvc.body_gate), the same on the proxy.
MAX_JSON_DEPTH = body_gate.MAX_JSON_DEPTH
JSON_INT_RANGE = body_gate.JSON_INT_RANGE
MAX_SEARCH_HINT_CHARS = 1_000  # a tool's tool_search keywords

# Rules the engine checks itself, with its own messages naming the field (spec
# 004's "Context limit must be positive", the tokenizer's list): declared in the
# schema only (json_schema_extra), so the documented contract is the enforced one
# and the messages stay the engine's.
# The tokenizer specs parse_tokenizer_spec accepts, in their canonical (lower
# case) form: the offline encodings and the models tiktoken maps to them, the
# cl100k families, a chars-per-token ratio. (It also takes any case and other
# tiktoken models; the pattern is the part a client can rely on.)
TOKENIZER_PATTERN = (
    r"^(approximate|cl100k_base"
    r"|ratio:([1-9][0-9]{0,5}(\.[0-9]{1,6})?|0\.[0-9]{0,5}[1-9])"
    r"|tiktoken:(gpt2|r50k_base|p50k_base|p50k_edit|cl100k_base|o200k_base"
    r"|(gpt-4o|gpt-4|gpt-3\.5-turbo)(-[a-z0-9.-]{1,40})?)"
    r"|(anthropic|claude|gemini|google:gemini|google-gemini)([:-][a-z0-9._-]{1,60})?)?$"
)


def in_value_branch(**keywords: Any) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` that adds ``keywords`` to an optional field's non-null
    branch (where readers and generators look for them), else to its schema."""

    def extra(schema: dict[str, Any]) -> None:
        branches = [b for b in schema.get("anyOf", ()) if b.get("type") != "null"]
        for target in branches or [schema]:
            target.update(keywords)

    return extra


POSITIVE = in_value_branch(minimum=1)
NOT_NEGATIVE = in_value_branch(minimum=0)
KNOWN_TOKENIZER = in_value_branch(pattern=TOKENIZER_PATTERN)


def exactly_one_of(**types: str) -> dict[str, Any]:
    """JSON Schema for "exactly one of these fields, and not null" (``oneOf`` of
    ``required``), for a model whose validator enforces that: field name -> JSON type."""
    return {
        "oneOf": [
            {"required": [name], "properties": {name: {"type": kind}}}
            for name, kind in types.items()
        ]
    }


def check_json(value: Any) -> Any:
    """``value`` unchanged, or a ValueError when it nests deeper than MAX_JSON_DEPTH
    or holds an integer outside JSON_INT_RANGE."""
    problem = body_gate.json_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


class In(BaseModel):
    # Plain pydantic, not ninja.Schema: inputs are never read off ORM objects,
    # and Schema's wrap validator for that costs on every message of a batch.
    model_config = ConfigDict(extra="forbid")
