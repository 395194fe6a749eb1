"""Writes of a session's tool definitions: checked, counted as sent after deferral."""

from __future__ import annotations

import hashlib

import jsonschema
import orjson
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from jsonschema.validators import validator_for

from contextsvc.engine.deferral import TOOL_SEARCH_NAME
from contextsvc.engine.messages import ToolDef
from contextsvc.engine.tokens import estimate_tool_schemas
from contextsvc.errors import ValidationFailed
from contextsvc.lru import BoundedLRU
from sessions import accounting, hotpath, status
from sessions.extensions import REGISTRY
from sessions.models import Session

from .checks import check_item_count, reject_duplicate_names
from .inputs import ToolData

# Digests of input schemas already found valid: re-registering the same MCP
# tools (every session of an agent does) skips the metaschema walk, which costs
# milliseconds per schema.
_VALID_SCHEMAS: BoundedLRU[str, bool] = BoundedLRU(20_000)


def _check_json_schema(i: int, tool: ToolData) -> None:
    """422 naming the tool when its input_schema is not valid JSON Schema.

    Checked against the schema's own ``$schema`` dialect, draft 2020-12 when it
    names none (what MCP and the Anthropic API take), as ``check_schema`` does.
    """
    schema = tool["input_schema"]
    digest = hashlib.sha256(
        orjson.dumps(schema, option=orjson.OPT_SORT_KEYS, default=str)
    ).hexdigest()
    if _VALID_SCHEMAS.get(digest):
        return
    try:
        validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = exc.json_path if hasattr(exc, "json_path") else "$"
        raise ValidationFailed(
            f"Tool {tool['name']!r} (tools[{i}]): input_schema is not valid JSON Schema:"
            f" {exc.message} at {where}",
            details={"field": f"tools.{i}.input_schema", "tool": tool["name"], "path": where},
        ) from None
    _VALID_SCHEMAS.put(digest, True)


def check_tools(tools: list[ToolData]) -> None:
    """Count, duplicate names, the reserved ``tool_search``, JSON Schema: 422 on the first miss."""
    check_item_count(tools, "tool", settings.CONTEXTSVC_MAX_TOOLS, "CONTEXTSVC_MAX_TOOLS")
    reject_duplicate_names(tools, "tool")
    for i, tool in enumerate(tools):
        if tool["name"] == TOOL_SEARCH_NAME and tool.get("category", "builtin") != "builtin":
            raise ValidationFailed(
                f"Tool {tool['name']!r} (tools[{i}]): the name is reserved for the built-in"
                " tool_search; register it with category 'builtin' or rename your tool",
                details={"field": f"tools.{i}.name"},
            )
        if (
            not isinstance(tool["input_schema"], dict)
            or tool["input_schema"].get("type") != "object"
        ):
            raise ValidationFailed(
                f"Tool {tool['name']!r}: input_schema must be a JSON Schema of type 'object'",
                details={"field": f"tools.{i}.input_schema"},
            )
        _check_json_schema(i, tool)


@transaction.atomic
def session_set_tools(*, session: Session, tools: list[ToolData]) -> Session:
    """Replace the tool definitions.

    Validated first, nothing partially applied. ``tool_tokens`` is what will be
    *sent*: with many tools, deferral (docs/concepts/deferral.md#deferral-threshold, the registry's
    ``tool_deferral`` hook) holds some back.
    """
    check_tools(tools)
    parsed = [ToolDef(**t) for t in tools]
    session = hotpath.lock_session(session.pk)
    sent = REGISTRY.tool_deferral[0](session, parsed) if REGISTRY.tool_deferral else None
    if sent is None:  # no deferral, or it failed (logged): count and send everything
        scale = accounting.estimate_config_of(session).tool_schema_scale
        sent = estimate_tool_schemas(
            parsed,
            accounting.tokenizer_of(session),
            scale=scale,
            uncounted=accounting.uncounted_tools(session),
        )
    session.tools = tools
    session.tool_tokens = sent
    status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save()
    return session


@transaction.atomic
def session_set_sent_tool_tokens(*, session: Session, tokens: int) -> Session:
    """The tool-description tokens actually sent, after deferral
    (docs/concepts/deferral.md#deferral-threshold).

    The budget's ``tool_descriptions`` and the guard count what goes out, not
    what is registered: 300 deferred MCP tools must not push a session to
    ``final``. Copies the new figures onto the caller's object too.
    """
    # The tools column can be a megabyte of JSON and is not needed here.
    locked = hotpath.lock_session(session.pk, exclude=hotpath.HEAVY_FIELDS)
    if locked.tool_tokens != tokens:
        locked.tool_tokens = tokens
        status.refresh_guard(locked)
        locked.save(update_fields=["tool_tokens", "guard_status", "used_tokens"])
    session.tool_tokens = locked.tool_tokens
    session.guard_status = locked.guard_status
    session.used_tokens = locked.used_tokens
    return locked
