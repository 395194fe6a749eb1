"""The context a session would send next (docs/concepts/context-build.md#one-assembler) with its
budget, assembled from the live messages, the tool plan, the prompt plan and the notes.

``context_preview`` is a read: it writes nothing and locks nothing (the
dashboard shows it; an operator looking is not a build). ``service`` records.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from contextsvc.engine.build import FORMATS, ContextParts, build_request, head_count_of
from contextsvc.engine.history_memo import HistoryMemo
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import ToolDef
from contextsvc.engine.recall import search_available
from contextsvc.engine.summary_placement import resolve_summary_role
from contextsvc.engine.window_stats import WindowStats
from contextsvc.errors import ValidationFailed
from contextsvc.lru import BoundedLRU
from sessions import accounting
from sessions.extensions import REGISTRY
from sessions.live import has_head
from sessions.models import Session
from sessions.selectors import context_window

from ..services.blocks import budget_blocks
from ..services.cache import account_build
from ..services.calls import breakpoint_labels, call_breakdown
from ..services.policy import cache_profile
from ..services.sections import PromptPlan, plain_plan, plan_prompt
from ..services.selection import ToolPlan, plan_tools

# Per-process memos of each session's previous build (``engine.history_memo``):
# the next build of a session renders only what was appended since. A memo is
# checked against the history it is given (the same message objects, from the
# context cache), so a stale one costs a full build, never a wrong body.
# Bounded by the messages and turns held.
HISTORY_MEMO_MAX_ITEMS = 200_000
_MEMOS: BoundedLRU[tuple[int, Any], HistoryMemo] = BoundedLRU(
    10_000, max_weight=HISTORY_MEMO_MAX_ITEMS, weigh=lambda memo: memo.size
)


def _memo(session: Session) -> HistoryMemo:
    """The session's memo, taken out while a build uses it (a build on another thread
    meanwhile starts a memo of its own; the last one put back stays)."""
    return _MEMOS.pop((session.pk, session.created_at)) or HistoryMemo()


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValidationFailed(
            f"format must be one of {', '.join(FORMATS)}", details={"field": "format"}
        )


def final_report_tool(session: Session, tools: Sequence[ToolDef]) -> ToolDef:
    """docs/concepts/guard.md#final-turn: the one tool a final turn offers (the agent's own, if
    registered)."""
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
    """docs/concepts/guard.md#final-turn: the instruction injected into a final turn."""
    name = accounting.final_tool_name(session)
    return (
        f"[Context limit reached: the next request would need {state.guard.projected:,} tokens "
        f"of the {state.guard.limit:,} available. Tools are restricted to {name}. "
        f"Call {name} now with your final answer: what you completed, what remains, "
        "and what the user must know.]"
    )


def _other_apps_blocks(session: Session) -> dict[str, Any]:
    # Every app's budget blocks but prompting's own: those describe the last
    # build (GET budget); a build answers with its own (``account_build``).
    out: dict[str, Any] = {}
    for hook in REGISTRY.budget_blocks:
        if hook is not budget_blocks:
            out.update(hook(session))
    return out


def build_context(
    session: Session,
    fmt: str,
    messages: Sequence[EngineMessage],
    tool_plan: ToolPlan,
    *,
    extra: int = 0,
    apps_blocks: bool = True,
    message_tokens: int | None = None,
) -> tuple[dict[str, Any], ContextParts, PromptPlan]:
    """The request body and the budget, without prompting's accounting blocks
    (and without the other apps' with ``apps_blocks=False``: the proxy reads
    only the guard and the totals). ``message_tokens``: the messages' token
    counts summed (``WindowStats.tokens``), so the build does not add them up.

    The tools come from deferral (docs/concepts/deferral.md#deferral-threshold), the sections are
    ordered and the cache breakpoints placed (docs/concepts/caching.md#breakpoints); each degrades
    rather than fails (docs/concepts/caching.md#degradation). On a ``final`` verdict the tools
    shrink to the final-report tool and the instruction is injected
    (docs/concepts/guard.md#final-turn).
    """
    state = accounting.compute_budget(session, extra=extra)
    final = state.guard.status == "final" or session.status == Session.Status.FINAL
    tools = [final_report_tool(session, tool_plan.registered)] if final else tool_plan.tools
    prompt_plan = plan_prompt(
        session, tools=tools, tool_plan=tool_plan, messages=messages, message_tokens=message_tokens
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
        mid_system=(prompt_plan.profile or cache_profile(session)).mid_system_messages,
        summary_role=resolve_summary_role((session.policy or {}).get("compaction")),
        head_count=head_count_of(messages, session.head_end_seq) if has_head(session) else 0,
        keep_thinking_turns=((session.policy or {}).get("reasoning") or {}).get(
            "keep_thinking_turns"
        ),
        search_hint=search_available(session.policy),
        memo=_memo(session),
    )
    try:
        body = build_request(fmt, parts)
    except Exception as exc:
        if parts.plain:
            raise
        # docs/concepts/caching.md#degradation: the assembler's section/marker handling failed; send
        # the plain concatenation rather than nothing.
        prompt_plan = plain_plan(session, exc)
        parts.sections, parts.cache, parts.plain = prompt_plan.sections, None, True
        body = build_request(fmt, parts)
    _MEMOS.put((session.pk, session.created_at), parts.memo)  # its weight, grown
    body["budget"] = state.to_dict()
    if apps_blocks:
        body["budget"].update(_other_apps_blocks(session))
    return body, parts, prompt_plan


def context_preview(session: Session, fmt: str, *, extra: int = 0) -> dict[str, Any]:
    """The body ``GET /context`` would answer now, computed without writing or locking.

    The figures are a build's (tool selection, cache estimate against the last
    recorded build); the sent tool tokens change on ``session`` in memory only.
    """
    return _preview(session, fmt, extra=extra)[0]


def context_preview_detail(session: Session, fmt: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``context_preview`` and its per-item breakdown, as a recorded call keeps it
    (``ContextCall.breakdown``), plus the breakpoints in cache order and each
    tool result's tokens by call id (what the context tab shows per block)."""
    body, parts, tool_plan, prompt_plan, stats = _preview(session, fmt)
    detail = call_breakdown(session, parts, tool_plan, prompt_plan, stats)
    detail["breakpoints"] = breakpoint_labels(parts, prompt_plan, detail["sections"])
    detail["result_tokens"] = ResultTokens(parts.messages)
    return body, detail


class ResultTokens(Mapping[str, int]):
    """Each tool result's tokens by call id (the newest result of an id wins),
    read from the newest message back only as far as the lookups need: the
    context tab shows a page of blocks, most often the last one."""

    def __init__(self, messages: Sequence[EngineMessage]) -> None:
        self._messages = messages
        self._found: dict[str, int] = {}
        self._next = len(messages) - 1

    def _scan(self, until: str | None) -> None:
        found, messages = self._found, self._messages
        while self._next >= 0 and (until is None or until not in found):
            msg = messages[self._next]
            self._next -= 1
            if msg.tool_call_id and msg.tool_call_id not in found:
                found[msg.tool_call_id] = msg.token_count or 0

    def __getitem__(self, call_id: str) -> int:
        self._scan(call_id)
        return self._found[call_id]

    def __contains__(self, call_id: object) -> bool:
        if isinstance(call_id, str):
            self._scan(call_id)
        return call_id in self._found

    def __iter__(self) -> Iterator[str]:
        self._scan(None)
        return iter(self._found)

    def __len__(self) -> int:
        self._scan(None)
        return len(self._found)


def _preview(
    session: Session, fmt: str, *, extra: int = 0
) -> tuple[dict[str, Any], ContextParts, ToolPlan, PromptPlan, WindowStats]:
    check_format(fmt)
    messages, stats = context_window(session)
    tool_plan = plan_tools(session, messages)
    if tool_plan.sent_tokens is not None:
        session.tool_tokens = tool_plan.sent_tokens
    body, parts, prompt_plan = build_context(
        session, fmt, messages, tool_plan, extra=extra, message_tokens=stats.tokens
    )
    body["budget"].update(account_build(session, fmt, parts, tool_plan, prompt_plan).blocks())
    return body, parts, tool_plan, prompt_plan, stats
