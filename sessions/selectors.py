"""Reads for the API and the dashboard. Every lookup takes the owner, so a
stranger's session id is a 404, never a 403 that confirms it exists."""

from __future__ import annotations

from typing import Any

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import PromptSection, ToolCall, ToolDef
from contextsvc.errors import NotFound, ValidationFailed

from . import accounting
from .models import AgentKey, Message, Session, UsageReport

SECTION_ORDER = {"base": 0, "rules": 1, "memory": 2, "skill": 3, "scratchpad": 4, "status": 5}

MESSAGE_FIELDS = (
    "seq", "role", "content", "parts", "tool_calls", "tool_call_id", "name",
    "reasoning", "output_ref", "view", "view_state", "token_count",
)


def session_get(*, owner: AgentKey, external_id: str) -> Session:
    session = Session.objects.filter(owner=owner, external_id=external_id).first()
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
    (seq, role, content, parts, tool_calls, tool_call_id, name, reasoning,
     output_ref, view, view_state, token_count) = row
    return EngineMessage(
        role=role,
        content=parts if parts is not None else content,
        tool_calls=tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c.get("arguments") or {})
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


def live_messages(session: Session) -> list[EngineMessage]:
    """The live window (after the newest snapshot), oldest first."""
    rows = (
        Message.objects.filter(session=session, seq__gte=session.window_start_seq)
        .order_by("seq")
        .values_list(*MESSAGE_FIELDS)
    )
    return [row_to_message(r) for r in rows]


def ordered_sections(session: Session) -> list[PromptSection]:
    # spec 002 §4: static → dynamic; stable within a kind (the agent's order).
    sections = [PromptSection(**s) for s in session.sections or ()]
    return sorted(sections, key=lambda s: SECTION_ORDER.get(s.kind, 99))


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


def session_context(session: Session, fmt: str, *, extra: int = 0) -> dict[str, Any]:
    """The request body to send (spec 003 BuildMessages) plus the budget.

    On a ``final`` verdict the tools shrink to the final-report tool and the
    instruction is injected (spec 001 enforcement); the caller marks the session.
    """
    from contextsvc.engine.build import FORMATS

    if fmt not in FORMATS:
        raise ValidationFailed(
            f"format must be one of {', '.join(FORMATS)}", details={"field": "format"}
        )
    state = accounting.compute_budget(session, extra=extra)
    tools = session_tools(session)
    final = state.guard.status == "final" or session.status == Session.Status.FINAL
    parts = ContextParts(
        model=session.model,
        max_output_tokens=session.max_output_tokens,
        sections=ordered_sections(session),
        retain=session.retain,
        summary=session.summary,
        messages=live_messages(session),
        tools=[final_report_tool(session, tools)] if final else tools,
        final_instruction=final_instruction(session, state) if final else None,
    )
    body = build_request(fmt, parts)
    body["budget"] = state.to_dict()
    return body


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


def session_to_dict(session: Session, *, state: accounting.BudgetState | None = None) -> dict[str, Any]:
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
