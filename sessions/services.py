"""Writes for sessions (HackSoft style: keyword-only, atomic, ``<entity>_<action>``).

The append path follows healthchecks' ``Check.ping``: do the slow work
(tokenizing) before taking the lock, then lock the session row, take the next
seq, insert, bump the cached counters, commit. Follow-up work is enqueued with
``transaction.on_commit``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
import pydantic
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Sum
from django.utils import timezone

from contextsvc import nul
from contextsvc.engine.budget import DEFAULT_BLOCK_RATIO, DEFAULT_COMPACT_RATIO, Thresholds
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import PromptSection, ToolCall, ToolDef, content_text
from contextsvc.engine.output_views import ViewConfig
from contextsvc.engine.tokens import (
    estimate_message,
    estimate_sections,
    estimate_tool_schemas,
    get_tokenizer,
)
from contextsvc.errors import Conflict, ValidationFailed

from . import accounting, hotpath, status
from .extensions import REGISTRY
from .models import AgentKey, IdempotencyRecord, Message, Session, UsageReport, hash_key
from .outputs.budget import apply_tool_outputs, cache_config
from .outputs.ingest import output_for_message, save_pending_outputs
from .outputs.store import PendingOutput, output_info, ref_dict
from .schemas import PolicyIn

# --- agent keys -------------------------------------------------------------------


def agent_key_create(*, name: str) -> tuple[AgentKey, str]:
    """Create a key; the raw key is returned once and never stored."""
    if not name or len(name) > 100:
        raise ValidationFailed("Key name must be 1-100 characters", details={"field": "name"})
    raw = AgentKey.generate_raw_key()
    key = AgentKey.objects.create(name=name, prefix=raw[:10], key_hash=hash_key(raw))
    return key, raw


def agent_key_revoke(*, key: AgentKey) -> AgentKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


# --- sessions ---------------------------------------------------------------------


def _check_policy(policy: dict[str, Any]) -> None:
    """422 naming the field unless ``policy`` passes the API's policy schema.

    Checked here too, not only by the API: a stored policy is read by every
    later call, so one bad number (or type) would break the session for good.
    """
    try:
        PolicyIn.model_validate(policy)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(("policy", *(str(p) for p in first["loc"])))
        raise ValidationFailed(f"{field}: {first['msg']}", details={"field": field}) from None


def _normalise_policy(policy: dict[str, Any], *, tokenizer: str) -> dict[str, Any]:
    """Validate cross-field rules and resolve each extra target's limits once."""
    policy = {k: v for k, v in policy.items() if v is not None}
    thresholds = policy.get("thresholds")
    if thresholds is not None:
        # A partial section keeps the defaults for what it leaves out, stored
        # whole so that every reader sees both numbers.
        merged = {"compact_at": DEFAULT_COMPACT_RATIO, "block_at": DEFAULT_BLOCK_RATIO}
        merged.update(thresholds)
        try:
            Thresholds(compact_ratio=merged["compact_at"], block_ratio=merged["block_at"])
        except EngineValidationError as exc:
            raise ValidationFailed(
                f"policy.thresholds: {exc.message}", details={"field": "policy.thresholds"}
            ) from None
        policy["thresholds"] = merged
    targets = []
    for i, target in enumerate(policy.get("targets") or []):
        provider = target["provider"]
        explicit = {
            k: target.get(k) for k in ("context_window", "max_output_tokens", "buffer_tokens")
        }
        try:
            limits = accounting.resolve_session_limits(
                provider=provider, model=target["model"], explicit=explicit
            )
        except ValueError as exc:
            raise ValidationFailed(
                f"policy.targets[{i}]: {exc}", details={"field": f"policy.targets.{i}"}
            ) from exc
        targets.append(
            {
                "provider": provider,
                "model": target["model"],
                "context_window": limits.context_window,
                "max_output_tokens": limits.max_output_tokens,
                "buffer_tokens": limits.buffer_tokens,
                "tokenizer": limits.tokenizer or tokenizer,
            }
        )
    if targets:
        policy["targets"] = targets
    return policy


def session_create(*, owner: AgentKey, data: dict[str, Any]) -> Session:
    model = data["model"]
    provider = data.get("provider") or accounting.infer_provider(model)
    explicit = {
        k: data.get(k)
        for k in ("context_window", "max_output_tokens", "buffer_tokens", "tokenizer")
    }
    limits = accounting.resolve_session_limits(provider=provider, model=model, explicit=explicit)
    get_tokenizer(limits.tokenizer)  # an unknown tokenizer is a 422 now, not at first append
    _check_policy(data.get("policy") or {})
    policy = _normalise_policy(data.get("policy") or {}, tokenizer=limits.tokenizer)
    external_id = data.get("id") or f"ses_{secrets.token_hex(8)}"
    try:
        with transaction.atomic():
            return Session.objects.create(
                owner=owner,
                external_id=external_id,
                agent=data.get("agent") or owner.name,
                model=model,
                provider=provider,
                context_window=limits.context_window,
                max_output_tokens=limits.max_output_tokens,
                buffer_tokens=limits.buffer_tokens,
                tokenizer=limits.tokenizer,
                policy=policy,
            )
    except IntegrityError as exc:
        raise Conflict(f"Session {external_id!r} already exists", details={"field": "id"}) from exc


@transaction.atomic
def session_update(*, session: Session, data: dict[str, Any]) -> Session:
    session = hotpath.lock_session(session.pk)
    for field in ("agent", "model", "provider"):
        if data.get(field) is not None:
            setattr(session, field, data[field])
    limit_fields = ("context_window", "max_output_tokens", "buffer_tokens", "tokenizer")
    if any(data.get(k) is not None for k in (*limit_fields, "model", "provider")):
        # Fields the patch leaves out keep their current values.
        explicit = {
            k: data[k] if data.get(k) is not None else getattr(session, k) for k in limit_fields
        }
        limits = accounting.resolve_session_limits(
            provider=session.provider, model=session.model, explicit=explicit
        )
        tokenizer_changed = limits.tokenizer != session.tokenizer
        session.context_window = limits.context_window
        session.max_output_tokens = limits.max_output_tokens
        session.buffer_tokens = limits.buffer_tokens
        session.tokenizer = limits.tokenizer
        if tokenizer_changed:
            get_tokenizer(limits.tokenizer)
    if data.get("policy") is not None:
        # The patch replaces whole sections, so checking it checks what changes.
        _check_policy(data["policy"])
        merged = {**(session.policy or {}), **data["policy"]}
        session.policy = _normalise_policy(merged, tokenizer=session.tokenizer)
    status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save()
    return session


def _reject_duplicates(items: Sequence[dict[str, Any]], what: str) -> None:
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item["name"] in seen:
            raise ValidationFailed(
                f"Duplicate {what} name {item['name']!r} at index {i}",
                details={"field": f"{what}s.{i}.name"},
            )
        seen.add(item["name"])


def _check_count(items: Sequence[dict[str, Any]], what: str, maximum: int, setting: str) -> None:
    if len(items) > maximum:
        first = items[maximum]
        raise ValidationFailed(
            f"At most {maximum} {what}s per session ({setting}); got {len(items)}:"
            f" {what} {first.get('name')!r} at index {maximum} is over the limit",
            details={"field": f"{what}s.{maximum}", "max": maximum, "count": len(items)},
        )


# Digests of input schemas already found valid: re-registering the same MCP
# tools (every session of an agent does) skips the metaschema walk, which costs
# milliseconds per schema.
_VALID_SCHEMAS: dict[str, None] = {}
_VALID_SCHEMAS_SIZE = 20_000


def _check_json_schema(i: int, tool: dict[str, Any]) -> None:
    """422 naming the tool when its input_schema is not valid JSON Schema.

    Checked against the schema's own ``$schema`` dialect, draft 2020-12 when it
    names none (what MCP and the Anthropic API take), as ``check_schema`` does.
    """
    import jsonschema
    from jsonschema.validators import validator_for

    schema = tool["input_schema"]
    digest = hashlib.sha256(
        orjson.dumps(schema, option=orjson.OPT_SORT_KEYS, default=str)
    ).hexdigest()
    if digest in _VALID_SCHEMAS:
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
    if len(_VALID_SCHEMAS) >= _VALID_SCHEMAS_SIZE:
        _VALID_SCHEMAS.pop(next(iter(_VALID_SCHEMAS)))
    _VALID_SCHEMAS[digest] = None


@transaction.atomic
def session_set_sections(*, session: Session, sections: list[dict[str, Any]]) -> Session:
    """Replace the prompt sections; counted once here, never per request.

    Everything is checked before anything is written (issue 6 "bad input").
    """
    from contextsvc.engine.prompt import check_kind

    _check_count(sections, "section", settings.CONTEXTSVC_MAX_SECTIONS, "CONTEXTSVC_MAX_SECTIONS")
    _reject_duplicates(sections, "section")
    parsed = [PromptSection(**s) for s in sections]
    for i, section in enumerate(parsed):
        check_kind(section, i)
    session = hotpath.lock_session(session.pk)
    tokenizer = accounting.tokenizer_of(session)
    session.sections = sections
    session.system_tokens = estimate_sections([s for s in parsed if s.kind != "skill"], tokenizer)
    session.skill_tokens = estimate_sections([s for s in parsed if s.kind == "skill"], tokenizer)
    status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save()
    return session


@transaction.atomic
def session_set_tools(*, session: Session, tools: list[dict[str, Any]]) -> Session:
    """Replace the tool definitions.

    Validated first (count, duplicate names, the reserved ``tool_search``,
    JSON Schema), nothing partially applied. ``tool_tokens`` is what will be
    *sent*: with many tools, deferral (issue 6, spec 002 §5) holds some back.
    """
    from contextsvc.engine.deferral import TOOL_SEARCH_NAME

    _check_count(tools, "tool", settings.CONTEXTSVC_MAX_TOOLS, "CONTEXTSVC_MAX_TOOLS")
    _reject_duplicates(tools, "tool")
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
    parsed = [ToolDef(**t) for t in tools]
    session = hotpath.lock_session(session.pk)
    from prompting.services.tools import record_registered_tools as tools_registered

    sent = tools_registered(session=session, tools=parsed)
    if sent is None:  # deferral failed (logged): count and send everything
        scale = accounting.estimate_config_of(session).tool_schema_scale
        sent = estimate_tool_schemas(parsed, accounting.tokenizer_of(session), scale=scale)
    session.tools = tools
    session.tool_tokens = sent
    status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save()
    return session


@transaction.atomic
def session_set_sent_tool_tokens(*, session: Session, tokens: int) -> Session:
    """The tool-description tokens actually sent, after deferral (issue 6).

    The budget's ``tool_descriptions`` and the guard count what goes out, not
    what is registered: 300 deferred MCP tools must not push a session to
    ``final``. Copies the new figures onto the caller's object too.
    """
    qs = Session.objects.defer("tools")  # up to a megabyte of JSON, not needed here
    if connection.features.has_select_for_no_key_update:
        qs = qs.select_for_update(no_key=True)
    else:
        qs = qs.select_for_update()
    locked = qs.get(pk=session.pk)
    if locked.tool_tokens != tokens:
        locked.tool_tokens = tokens
        status.refresh_guard(locked)
        locked.save(update_fields=["tool_tokens", "guard_status", "used_tokens"])
    session.tool_tokens = locked.tool_tokens
    session.guard_status = locked.guard_status
    session.used_tokens = locked.used_tokens
    return locked


# --- messages ---------------------------------------------------------------------


@dataclass(slots=True)
class Prepared:
    """A posted message made ready outside the lock: converted and counted."""

    message: EngineMessage
    row: dict[str, Any]
    # Tool results: the stored output (spec 000 §1.4 ToolOutputRef) and its info
    # for a failure view decided under the lock.
    ref: dict[str, Any] | None = None
    info: Any = None
    pending: Any = None  # a small output to insert under the lock


def to_engine_message(data: dict[str, Any]) -> EngineMessage:
    return EngineMessage(
        role=data["role"],
        content=data.get("content") or "",
        tool_calls=tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c.get("arguments") or {})
            for c in data.get("tool_calls") or ()
        ),
        tool_call_id=data.get("tool_call_id"),
        name=data.get("name"),
        reasoning=data.get("reasoning"),
        output_ref=data.get("output_ref"),
    )


def nul_view_config(cache: ViewConfig, text: str) -> ViewConfig:
    """With the cache off an output is not cut: a view config its whole text fits."""
    size = 4 * len(text) + 1  # UTF-8 takes at most 4 bytes a character
    return dataclasses.replace(cache, max_message_bytes=size, max_line_length=size)


def prepare_messages(session: Session, messages: Sequence[dict[str, Any]]) -> list[Prepared]:
    tokenizer = accounting.tokenizer_of(session)
    config = accounting.estimate_config_of(session)
    cache = cache_config(session)
    # Tool names for outputs (the lock-side match fills Message.name the same way).
    open_calls = dict(session.open_tool_calls or {})
    pending: dict[str, PendingOutput] = {}
    prepared = []
    for i, data in enumerate(messages):
        msg = to_engine_message(data)
        for call in msg.tool_calls:
            open_calls[call.id] = call.name
        stored = None
        # A NUL in a tool output is data: its bytes go to the output store even
        # with the cache off (text columns cannot hold it), the view shows it escaped.
        nul_bytes = msg.role == "tool" and not cache.enabled and nul.NUL in msg.text
        if msg.role == "tool" and (cache.enabled or msg.output_ref or nul_bytes):
            # spec 000 §1.5: store the full output, put its view in context.
            # Only the view is tokenized; the blob is never (DESIGN.md).
            if msg.output_ref and msg.text:
                raise ValidationFailed(
                    f"messages[{i}]: a tool message carries content or output_ref, not both",
                    details={"field": f"messages.{i}.output_ref"},
                )
            stored = output_for_message(
                session=session,
                config=nul_view_config(cache, msg.text) if nul_bytes else cache,
                text=None if msg.output_ref else msg.text,
                output_ref=msg.output_ref,
                tool_name=msg.name or open_calls.get(msg.tool_call_id or "", ""),
                field_name=f"messages.{i}.output_ref",
                pending=pending,
            )
            msg.output_ref = stored.output.ref
            msg.view = stored.view.text
            msg.view_state = stored.view.state
            if stored.content is not None:
                msg.content = stored.content
        if msg.role == "tool":
            msg.content = nul.escape_content(msg.content)
            if msg.view is not None:
                msg.view = nul.escape(msg.view)
        msg.token_count = estimate_message(msg, tokenizer, config)
        content = msg.content
        if stored is not None and msg.view is not None:
            # The output lives in its ToolOutput; the row keeps only media parts.
            media: list[dict[str, Any]] = []
            if isinstance(content, list):
                media = [part for part in content if part.get("type", "text") != "text"]
            content = media or ""
        prepared.append(
            Prepared(
                message=msg,
                row={
                    "role": msg.role,
                    "content": content if isinstance(content, str) else content_text(content),
                    "parts": content if isinstance(content, list) else None,
                    "tool_calls": [
                        {"id": c.id, "name": c.name, "arguments": c.arguments}
                        for c in msg.tool_calls
                    ],
                    "tool_call_id": msg.tool_call_id,
                    "name": msg.name,
                    "reasoning": msg.reasoning,
                    "output_ref": msg.output_ref,
                    "view": msg.view,
                    "view_state": msg.view_state,
                    "token_count": msg.token_count,
                },
                ref=ref_dict(stored.output) if stored else None,
                info=output_info(stored.output, msg.name) if stored else None,
                pending=stored.pending if stored else None,
            )
        )
    return prepared


def _match_tool_calls(open_calls: dict[str, str], prepared: list[Prepared]) -> dict[str, str]:
    """Check every tool result answers an open call; return the calls left open."""
    open_calls = dict(open_calls)
    for i, p in enumerate(prepared):
        msg = p.message
        if msg.role == "assistant":
            for call in msg.tool_calls:
                open_calls[call.id] = call.name
        elif msg.role == "tool":
            name = open_calls.pop(msg.tool_call_id or "", None)
            if name is None:
                raise ValidationFailed(
                    f"messages[{i}].tool_call_id {msg.tool_call_id!r} matches no open tool call "
                    "of this session",
                    details={"field": f"messages.{i}.tool_call_id"},
                )
            if not p.row["name"]:
                p.row["name"] = name
    return open_calls


def _duplicate_call_id(messages: Sequence[dict[str, Any]]) -> None:
    """422 when two tool calls of one batch share an id (providers reject the pair)."""
    seen: set[str] = set()
    for i, data in enumerate(messages):
        for k, call in enumerate(data.get("tool_calls") or ()):
            if call["id"] in seen:
                raise ValidationFailed(
                    f"messages[{i}].tool_calls[{k}].id {call['id']!r} is used by an earlier tool"
                    " call of this batch; tool-call ids must be unique in a session",
                    details={"field": f"messages.{i}.tool_calls.{k}.id"},
                )
            seen.add(call["id"])


def _reused_call_id(session: Session, prepared: list[Prepared]) -> None:
    """422 when a new tool call reuses an id the session already used (caller holds the lock).

    An id in use is either still open (``open_tool_calls``, already loaded) or
    answered (a tool row: one probe of ``message_tool_call_id_idx``), so the
    cost does not grow with the session. A call that compaction dropped
    unanswered is in neither; its id sits before the window and is never sent
    again, so a reuse cannot reach a provider twice.
    """
    new = {
        call.id: (i, k)
        for i, p in enumerate(prepared)
        for k, call in enumerate(p.message.tool_calls)
    }
    if not new:
        return
    open_calls = session.open_tool_calls or {}
    reused = [call_id for call_id in new if call_id in open_calls]
    how = "is still open"
    if not reused:
        reused = _answered_call_ids(session.pk, list(new))
        how = "was already answered"
    if reused:
        i, k = new[reused[0]]
        raise ValidationFailed(
            f"messages[{i}].tool_calls[{k}].id {reused[0]!r} {how} in this session;"
            " tool-call ids must be unique in a session",
            details={"field": f"messages.{i}.tool_calls.{k}.id"},
        )


# Under SQLite's and PostgreSQL's limits on parameters per statement.
_PROBE_CHUNK = 500


def _answered_call_ids(session_pk: int, ids: list[str]) -> list[str]:
    """At most one of ``ids`` some tool row of the session answers.

    Plain SQL on Django's cursor: the ORM spends ~2 ms compiling this
    lookup, the query itself ~0.1 ms (the append's p50 is ~10 ms). Chunked:
    a batch may carry more ids than a statement may have parameters.
    """
    meta = Message._meta
    column = meta.get_field("tool_call_id").column
    with connection.cursor() as cursor:
        for start in range(0, len(ids), _PROBE_CHUNK):
            chunk = ids[start : start + _PROBE_CHUNK]
            cursor.execute(
                f"SELECT {column} FROM {meta.db_table}"
                f" WHERE {meta.get_field('session').column} = %s"
                f" AND {column} IN ({', '.join(['%s'] * len(chunk))}) LIMIT 1",
                [session_pk, *chunk],
            )
            found = [row[0] for row in cursor.fetchall()]
            if found:
                return found
    return []


def request_fingerprint(messages: Sequence[dict[str, Any]]) -> str:
    """An Idempotency-Key's fingerprint: over the parsed messages, canonicalised.

    Sorted keys and no whitespace, after parsing (defaults filled in, JSON-text
    tool arguments decoded): a client that re-serialises its retry with
    another key order or spacing means the same request and must not get a 409.
    """
    return hashlib.sha256(orjson.dumps(list(messages), option=orjson.OPT_SORT_KEYS)).hexdigest()


def _replay(session: Session, key: str, fingerprint: str) -> dict[str, Any] | None:
    record = IdempotencyRecord.objects.filter(session=session, key=key).first()
    if record is None:
        return None
    if record.request_hash != fingerprint:
        raise Conflict(
            "Idempotency-Key was already used with a different request body",
            details={"field": "Idempotency-Key"},
        )
    return record.response


# What an append changes on the session row (one precompiled UPDATE).
APPEND_FIELDS = (
    "open_tool_calls",
    "last_seq",
    "message_count",
    "live_message_count",
    "conversation_tokens",
    "updated_at",
    "guard_status",
    "used_tokens",
    "tool_output_tokens",
    "tool_trim_seq",
    "tool_count_window_seq",
    "reserved_tokens",
    "tool_reservations",
    "tool_budget_exceeded",
)


def session_append_messages(
    *,
    session: Session,
    messages: Sequence[dict[str, Any]],
    idempotency_key: str | None = None,
    fingerprint: str = "",
    prepare: Callable[[Session, Sequence[dict[str, Any]]], list[Prepared]] | None = None,
) -> dict[str, Any]:
    """Append a batch; returns the API response (also what a retry replays)."""
    if not messages:
        raise ValidationFailed("Conversation has no messages", details={"field": "messages"})
    if len(messages) > settings.CONTEXTSVC_MAX_BATCH:
        raise ValidationFailed(
            f"At most {settings.CONTEXTSVC_MAX_BATCH} messages per request "
            f"(got {len(messages)}); post them in several batches",
            details={"field": "messages"},
        )
    if idempotency_key:
        replay = _replay(session, idempotency_key, fingerprint)
        if replay is not None:
            return replay
    _duplicate_call_id(messages)
    # Tokenizing is the slow part: do it before taking the row lock.
    prepared = (prepare or prepare_messages)(session, messages)
    with transaction.atomic():
        session = hotpath.relock_session(session, exclude=hotpath.HEAVY_FIELDS)
        if idempotency_key:
            # A concurrent retry may have committed while we tokenized.
            replay = _replay(session, idempotency_key, fingerprint)
            if replay is not None:
                return replay
        _reused_call_id(session, prepared)
        session.open_tool_calls = _match_tool_calls(session.open_tool_calls or {}, prepared)
        first = session.last_seq + 1
        save_pending_outputs(session, prepared)
        # spec 000 §1.7 budget trim and spec 001 tool preflight, from cached counters.
        tool_effects = apply_tool_outputs(session, prepared, first)
        if tool_effects.budget_exceeded:
            status.session_mark_final(session=session, reason="toolBudgetExceeded")
        now = timezone.now()
        rows = [
            Message(session=session, seq=first + i, created_at=now, **p.row)
            for i, p in enumerate(prepared)
        ]
        hotpath.insert_messages(rows)
        added = sum(p.row["token_count"] for p in prepared)
        session.last_seq = first + len(rows) - 1
        session.message_count += len(rows)
        session.live_message_count += len(rows)
        session.conversation_tokens += added
        session.updated_at = now
        state = status.refresh_guard(session)
        hotpath.save_fields(session, APPEND_FIELDS)
        response = {
            "session_id": session.external_id,
            "messages": [
                {
                    "seq": row.seq,
                    "role": row.role,
                    "token_count": row.token_count,
                    "output_ref": row.output_ref,
                    "view": row.view_state,
                    "ref": p.ref,
                }
                for row, p in zip(rows, prepared, strict=True)
            ],
            "trimmed_seqs": tool_effects.trimmed_seqs,
            "budget": state.to_dict(),
        }
        if idempotency_key:
            IdempotencyRecord.objects.create(
                session=session,
                key=idempotency_key,
                request_hash=fingerprint,
                status_code=200,
                response=response,
            )
        # "tool_overflow": an output did not fit, compaction is due whatever the tier.
        last_role = "tool_overflow" if tool_effects.overflow_seqs else rows[-1].role
        for hook in REGISTRY.after_append:
            transaction.on_commit(lambda hook=hook: hook(session, state, last_role))
    return response


# --- usage and guard ----------------------------------------------------------------


@transaction.atomic
def session_record_usage(
    *, session: Session, usage: dict[str, Any]
) -> tuple[UsageReport, accounting.BudgetState]:
    session = hotpath.lock_session(session.pk)
    through = usage.get("through_seq")
    if through is None:
        through = session.last_seq
    if through > session.last_seq:
        raise ValidationFailed(
            f"through_seq {through} is beyond the last message (seq {session.last_seq})",
            details={"field": "through_seq"},
        )
    # spec 000 §2.3: total = input + cache_creation + cache_read + output
    total = (
        usage.get("input_tokens", 0)
        + usage.get("cache_creation_tokens", 0)
        + usage.get("cache_read_tokens", 0)
        + usage.get("output_tokens", 0)
    )
    estimate_now = accounting.compute_budget(session).estimated
    later = 0
    if through < session.last_seq:
        later = (
            Message.objects.filter(
                session=session, seq__gt=through, seq__gte=session.window_start_seq
            ).aggregate(t=Sum("token_count"))["t"]
            or 0
        )
    estimated_then = max(0, estimate_now - later)
    report = UsageReport.objects.create(
        session=session,
        through_seq=through,
        input_tokens=usage.get("input_tokens", 0),
        output_tokens=usage.get("output_tokens", 0),
        cache_creation_tokens=usage.get("cache_creation_tokens", 0),
        cache_read_tokens=usage.get("cache_read_tokens", 0),
        total_tokens=total,
        estimated_tokens=estimated_then,
    )
    session.reported_total = total
    session.reported_through_seq = through
    session.estimated_at_report = estimated_then
    state = status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save()
    for hook in REGISTRY.after_append:
        transaction.on_commit(lambda hook=hook: hook(session, state, "usage"))
    return report, state


def idempotency_prune(*, older_than_hours: int | None = None) -> int:
    """Delete Idempotency-Key records past their retention; returns how many.

    A retry after that window stores the batch again, so the TTL must exceed
    any client's retry horizon (default 24 h, CONTEXTSVC_IDEMPOTENCY_TTL_HOURS).
    """
    hours = (
        settings.CONTEXTSVC_IDEMPOTENCY_TTL_HOURS if older_than_hours is None else older_than_hours
    )
    cutoff = timezone.now() - timedelta(hours=hours)
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def session_context_preflight(*, session: Session, extra: int = 0) -> Session:
    """Before an LLM call: at block or final, give the hooks a chance to make
    room (spec 002 §8: "Check IsBlocked (98%) → ForceCompact"), so a session
    that compaction can save is not ended by spec 001's final turn."""
    if session.status != Session.Status.ACTIVE or not REGISTRY.context_preflight:
        return session
    state = accounting.compute_budget(session, extra=extra)
    if state.guard.status not in ("block", "final"):
        return session
    for hook in REGISTRY.context_preflight:
        if hook(session, state):
            session.refresh_from_db()
            break
    return session
