"""Reads for the API and the dashboard. Every lookup takes the owner, so a
stranger's session id is a 404, never a 403 that confirms it exists."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson
from django.db.models import TextField
from django.db.models.functions import Cast

from contextsvc.engine import prompt as prompt_order
from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import PromptSection, ToolCall, ToolDef
from contextsvc.engine.prompt import order_sections
from contextsvc.errors import NotFound, ValidationFailed

from . import accounting
from .extensions import REGISTRY
from .models import AgentKey, Message, Session, UsageReport

SECTION_ORDER = prompt_order.SECTION_ORDER


def app_budget_blocks(session: Session) -> dict[str, Any]:
    """Blocks other apps add to the budget (``compaction``: auto, circuit breaker)."""
    out: dict[str, Any] = {}
    for hook in REGISTRY.budget_blocks:
        out.update(hook(session))
    return out


MESSAGE_FIELDS = (
    "seq",
    "role",
    "content",
    "parts",
    "tool_calls",
    "tool_call_id",
    "name",
    "reasoning",
    "output_ref",
    "view",
    "view_state",
    "token_count",
)


def is_session_id(external_id: str) -> bool:
    """Whether ``external_id`` could name a session: fits the column, no NUL
    (the database would refuse the lookup itself; such an id is simply not found)."""
    return 0 < len(external_id) <= 128 and "\x00" not in external_id


def session_get(*, owner: AgentKey, external_id: str, defer_tools: bool = False) -> Session:
    if not is_session_id(external_id):
        raise NotFound(f"Session {external_id!r} not found")
    qs = Session.objects.filter(owner=owner, external_id=external_id)
    if defer_tools:
        # The tool definitions can be a megabyte of JSON (300 MCP tools); the
        # context build and tool_search get them from a per-process cache keyed
        # by their digest (prompting.services.registered_tools) instead.
        qs = qs.defer("tools")
    session = qs.first()
    if session is None:
        raise NotFound(f"Session {external_id!r} not found")
    return session


def session_list(
    *,
    owner: AgentKey,
    agent: str | None = None,
    status: str | None = None,
    cursor: int | None = None,
    limit: int = 50,
) -> tuple[list[Session], int | None]:
    qs = Session.objects.filter(owner=owner).order_by("-id")
    if agent:
        qs = qs.filter(agent=agent)
    if status:
        qs = qs.filter(status=status)
    if cursor:
        qs = qs.filter(id__lt=cursor)
    page = list(qs[: limit + 1])
    next_cursor = page[limit - 1].id if len(page) > limit else None
    return page[:limit], next_cursor


def row_to_message(row: tuple) -> EngineMessage:
    (
        seq,
        role,
        content,
        parts,
        tool_calls,
        tool_call_id,
        name,
        reasoning,
        output_ref,
        view,
        view_state,
        token_count,
    ) = row
    # Compaction's tool clearing (issue 4) marks an assistant message "cleared"
    # when its call inputs were cleared: the stored arguments stay for audit,
    # the context sends none (token_count was recounted that way).
    inputs_cleared = role == "assistant" and view_state == "cleared"
    return EngineMessage(
        role=role,
        content=parts if parts is not None else content,
        tool_calls=tuple(
            ToolCall(
                id=c["id"],
                name=c["name"],
                arguments={} if inputs_cleared else (c.get("arguments") or {}),
            )
            for c in tool_calls or ()
        ),
        tool_call_id=tool_call_id,
        name=name,
        reasoning=reasoning,
        output_ref=output_ref,
        view=view,
        view_state=view_state,
        seq=seq,
        token_count=token_count,
    )


# MESSAGE_FIELDS with the JSON columns read as text (annotations of live_messages).
_FAST_MESSAGE_FIELDS = tuple(
    {"parts": "_parts", "tool_calls": "_calls"}.get(f, f) for f in MESSAGE_FIELDS
)


def _json_text(value: str | None) -> Any:
    # Most rows hold "[]" or NULL: skip the parser for those.
    if value is None:
        return None
    if value == "[]":
        return []
    return orjson.loads(value)


def live_messages(
    session: Session, *, after_seq: int = 0, through_seq: int | None = None
) -> list[EngineMessage]:
    """The live window (after the newest snapshot), oldest first.

    ``after_seq`` / ``through_seq`` bound the seqs read (the context cache
    reads only what was appended since). The JSON columns come back as text and
    are parsed with orjson: Django's JSONField converter costs ~7 µs per value,
    half the time of a 2,000-message build (issue 6 speed target).
    """
    qs = Message.objects.filter(session=session, seq__gte=session.window_start_seq)
    if after_seq:
        qs = qs.filter(seq__gt=after_seq)
    if through_seq is not None:
        qs = qs.filter(seq__lte=through_seq)
    rows = (
        qs.order_by("seq")
        .annotate(_parts=Cast("parts", TextField()), _calls=Cast("tool_calls", TextField()))
        .values_list(*_FAST_MESSAGE_FIELDS)
    )
    return [
        row_to_message((*r[:3], _json_text(r[3]), _json_text(r[4]) or [], *r[5:])) for r in rows
    ]


@dataclass(frozen=True, slots=True)
class _Window:
    created_at: Any  # with the pk, names the session even where pks are reused (test rollbacks)
    window_start_seq: int
    last_seq: int
    tokens: int
    trim_seq: Any
    messages: tuple[EngineMessage, ...]


# Per-process cache of converted live windows for session_context: an agent
# asks for the context of the same session before every call, and re-reading
# and converting 2,000 messages is most of a build's time (issue 6 speed
# target). Messages are append-only; what can change in old rows is their
# view (trim, clearing), and every such change moves the session's cached
# ``conversation_tokens`` (the sum of the live window's token counts, kept in
# the same transaction) — so a cached window is reused only when the counters
# on the freshly read session row say nothing but appends happened since.
_WINDOWS: OrderedDict[int, _Window] = OrderedDict()
_WINDOWS_LOCK = threading.Lock()
CONTEXT_CACHE_MAX_MESSAGES = 100_000


def _window_key(session: Session) -> tuple[Any, int, Any]:
    return session.created_at, session.window_start_seq, getattr(session, "tool_trim_seq", None)


def context_messages(session: Session) -> list[EngineMessage]:
    """``live_messages`` for a build, read incrementally when it is safe."""
    with _WINDOWS_LOCK:
        cached = _WINDOWS.get(session.pk)
    created, start, trim_seq = _window_key(session)
    messages: list[EngineMessage] | None = None
    if (
        cached is not None
        and (cached.created_at, cached.window_start_seq, cached.trim_seq)
        == (created, start, trim_seq)
        and cached.last_seq <= session.last_seq
    ):
        new = (
            live_messages(session, after_seq=cached.last_seq, through_seq=session.last_seq)
            if cached.last_seq < session.last_seq
            else []
        )
        total = cached.tokens + sum(m.token_count or 0 for m in new)
        count = len(cached.messages) + len(new)
        if total == session.conversation_tokens and count == session.live_message_count:
            messages = [*cached.messages, *new]
    if messages is None:
        messages = live_messages(session, through_seq=session.last_seq)
        total = sum(m.token_count or 0 for m in messages)
        if total != session.conversation_tokens or len(messages) != session.live_message_count:
            # Counters and rows disagree (a write in flight): use, do not keep.
            return messages
    window = _Window(created, start, session.last_seq, total, trim_seq, tuple(messages))
    with _WINDOWS_LOCK:
        _WINDOWS[session.pk] = window
        _WINDOWS.move_to_end(session.pk)
        while len(_WINDOWS) > 1 and sum(len(w.messages) for w in _WINDOWS.values()) > (
            CONTEXT_CACHE_MAX_MESSAGES
        ):
            _WINDOWS.popitem(last=False)
    return messages


def ordered_sections(session: Session) -> list[PromptSection]:
    # spec 002 §4: static → dynamic; stable within a kind (the agent's order).
    return order_sections([PromptSection(**s) for s in session.sections or ()])


def session_tools(session: Session) -> list[ToolDef]:
    return [ToolDef(**t) for t in session.tools or ()]


def final_report_tool(session: Session, tools: list[ToolDef]) -> ToolDef:
    name = accounting.final_tool_name(session)
    for tool in tools:
        if tool.name == name:
            return tool
    return ToolDef(
        name=name,
        description=(
            "Finish the task now: report what you completed, what remains, and anything "
            "the user must know. This is the only tool available because the context "
            "window is full."
        ),
        input_schema={
            "type": "object",
            "properties": {"report": {"type": "string", "description": "The final report"}},
            "required": ["report"],
        },
        category="builtin",
    )


def final_instruction(session: Session, state: accounting.BudgetState) -> str:
    name = accounting.final_tool_name(session)
    return (
        f"[Context limit reached: the next request would need {state.guard.projected:,} tokens "
        f"of the {state.guard.limit:,} available. Tools are restricted to {name}. "
        f"Call {name} now with your final answer: what you completed, what remains, "
        "and what the user must know.]"
    )


def session_context(
    session: Session, fmt: str, *, extra: int = 0, record: bool = True
) -> dict[str, Any]:
    """The request body to send (spec 003 BuildMessages) plus the budget.

    Issue 6 around the one assembler: the tools are chosen by deferral (spec
    002 §5), the sections ordered and the cache breakpoints placed (spec 002
    §4), and the build is accounted against the previous one (prefix tokens a
    provider can read from cache, cost). Each of those degrades rather than
    fails (spec 002 §8): the context is always built, ``budget.degraded``
    says what fell back. ``record=False`` previews (the dashboard): nothing
    about the build is saved.

    On a ``final`` verdict the tools shrink to the final-report tool and the
    instruction is injected (spec 001 enforcement); the caller marks the session.
    """
    from contextsvc.engine.build import FORMATS
    from prompting import services as prompting

    if fmt not in FORMATS:
        raise ValidationFailed(
            f"format must be one of {', '.join(FORMATS)}", details={"field": "format"}
        )
    messages = context_messages(session)
    tool_plan = prompting.select_tools(session, messages, record=record)
    state = accounting.compute_budget(session, extra=extra)
    final = state.guard.status == "final" or session.status == Session.Status.FINAL
    tools = [final_report_tool(session, tool_plan.registered)] if final else tool_plan.tools
    prompt_plan = prompting.plan_prompt(
        session, tools=tools, tool_plan=tool_plan, messages=messages
    )
    notes = [tool_plan.note] if tool_plan.note and not final else []
    if not final:
        notes.extend(note for hook in REGISTRY.context_notes if (note := hook(session, state)))
    parts = ContextParts(
        model=session.model,
        max_output_tokens=session.max_output_tokens,
        sections=prompt_plan.sections,
        retain=session.retain,
        summary=session.summary,
        messages=messages,
        tools=tools,
        notes=notes,
        final_instruction=final_instruction(session, state) if final else None,
        cache=prompt_plan.cache,
        plain=prompt_plan.plain,
    )
    try:
        body = build_request(fmt, parts)
    except Exception as exc:
        if parts.plain:
            raise
        # spec 002 §8: the assembler's section/marker handling failed; send the
        # plain concatenation rather than nothing.
        prompt_plan = prompting.plain_plan(session, exc)
        parts.sections, parts.cache, parts.plain = prompt_plan.sections, None, True
        body = build_request(fmt, parts)
    body["budget"] = state.to_dict()
    body["budget"].update(app_budget_blocks(session))
    body["budget"].update(
        prompting.finish_build(session, fmt, parts, tool_plan, prompt_plan, record=record)
    )
    return body


def prompt_budget_blocks(session: Session) -> dict[str, Any]:
    """``cache``, ``deferral`` and ``degraded`` for GET budget (issue 6)."""
    from prompting.services import budget_blocks

    return budget_blocks(session)


def session_usage_reports(session: Session, *, limit: int = 20) -> list[dict[str, Any]]:
    """Estimate and provider-reported tokens side by side, newest first."""
    reports = UsageReport.objects.filter(session=session).order_by("-id")[:limit]
    return [
        {
            "through_seq": r.through_seq,
            "estimated_tokens": r.estimated_tokens,
            "reported_total_tokens": r.total_tokens,
            "input_tokens": r.input_tokens,
            "output_tokens": r.output_tokens,
            "cache_creation_tokens": r.cache_creation_tokens,
            "cache_read_tokens": r.cache_read_tokens,
            "difference": r.total_tokens - r.estimated_tokens,
            "created_at": r.created_at,
        }
        for r in reports
    ]


def session_to_dict(
    session: Session, *, state: accounting.BudgetState | None = None
) -> dict[str, Any]:
    state = state or accounting.compute_budget(session)
    return {
        "id": session.external_id,
        "agent": session.agent,
        "model": session.model,
        "provider": session.provider,
        "status": session.status,
        "final_reason": session.final_reason or None,
        "context_window": session.context_window,
        "max_output_tokens": session.max_output_tokens,
        "buffer_tokens": session.buffer_tokens,
        "tokenizer": session.tokenizer,
        "policy": session.policy,
        "message_count": session.message_count,
        "live_message_count": session.live_message_count,
        "last_seq": session.last_seq,
        "window_start_seq": session.window_start_seq,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "budget": state.to_dict(),
    }
