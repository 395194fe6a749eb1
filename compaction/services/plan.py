"""Computing a compaction without writing: load the window, run the strategy chain.

What a run applies (``apply``) and what the dashboard previews
(``compaction_plan``) come from the same ``compute_plan``; it holds no lock,
so it may call the summariser for as long as that takes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextsvc.engine.build import ContextParts
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.reachability import RetentionReport, check_retention
from contextsvc.engine.recall import search_available
from contextsvc.engine.retention import WindowText, extract_key_facts
from contextsvc.engine.strategies.base import (
    CompactionConfig,
    ContextState,
    StrategyContext,
    TokenCounter,
    Window,
)
from contextsvc.engine.strategies.chain import DEFAULT_CHAIN, ChainResult, run_chain
from contextsvc.engine.summarize import Summarizer
from prompting.context.build import build_context
from prompting.services.selection import plan_tools
from sessions import accounting
from sessions.models import Session
from sessions.recall.search import recall_searchable

from .. import selectors, summarizers
from ..models import CompactionRun
from .cost import run_cost
from .policy import (
    DEFAULT_SUMMARY_MAX_TOKENS,
    compaction_policy,
    limit_tokens,
    plan_decision,
    resolve_chain,
    room_tokens,
    target_tokens,
)
from .window import view_key

Trigger = CompactionRun.Trigger

# What the summary prompt and its answer need besides the messages.
SUMMARY_PROMPT_MARGIN = 2_000


@dataclass(slots=True)
class CompactionPlan:
    """A computed compaction: the window it started from and the chain's result."""

    through_seq: int
    # (window start, retain, summary, retract count, head end): apply recomputes when it moved.
    base: tuple[int, str, str, int, int]
    window: Window
    result: ChainResult
    counter: TokenCounter
    target: int
    model: str
    summarizer: summarizers.TimedSummarizer
    retention: dict[str, Any] | None
    retention_score: float | None
    load_ms: float
    compute_ms: float
    cost: dict[str, Any] | None = None


def compaction_plan(
    *,
    session: Session,
    strategy: str | None,
    instructions: str = "",
    retain_last_turns: int | None = None,
    summarizer: Summarizer | None = None,
) -> CompactionPlan:
    """What a manual compaction would do now, computed without writing anything:
    the same window, chain, target and strategies as a real run (the
    dashboard's preview). ``summarizer`` defaults to the offline one, so no LLM
    is called."""
    draft = CompactionRun(
        session=session,
        trigger=Trigger.MANUAL,
        strategy=strategy or "chain",
        chain=list(resolve_chain(session, strategy)),
        forced=True,
        instructions=instructions,
        retain_last_turns=retain_last_turns,
    )
    return compute_plan(draft, summarizer or OfflineSummarizer())


def compute_plan(run: CompactionRun, summarizer: Summarizer | None) -> CompactionPlan:
    """Run ``run``'s chain on the live window up to its last message (no lock, no write)."""
    t0 = time.perf_counter()
    session = Session.objects.get(pk=run.session_id)
    through = session.last_seq
    base = (
        session.window_start_seq,
        session.retain,
        session.summary,
        session.retract_count,
        session.head_end_seq,
    )
    messages = selectors.window_messages(
        session, start_seq=session.window_start_seq, through_seq=through
    )
    # docs/concepts/compaction.md#sandwich-head: the conversation's head stays live before the
    # summary; every strategy keeps it as it is (only the sandwich sets it).
    head = selectors.head_messages(session)
    if not messages and not head and not session.retain and not session.summary:
        raise EngineValidationError("Conversation has no messages", field="messages")
    window = Window(
        messages=messages,
        retain=session.retain,
        summary=session.summary,
        head=head,
        search_hint=search_available(session.policy),
    )
    state = accounting.compute_budget(session)
    policy = compaction_policy(session)
    chain = tuple(run.chain) or DEFAULT_CHAIN
    effective = state.budget.effective_window
    summary_max = int(policy.get("summary_max_tokens") or DEFAULT_SUMMARY_MAX_TOKENS)
    policy_model = policy.get("model") or None
    inner = summarizer or summarizers.for_session(
        model=policy_model or session.model,
        provider=session.provider,
        choice=policy.get("summarizer"),
    )
    config = CompactionConfig.from_policy(
        {**policy, "summary_max_tokens": summary_max},
        model=summarizers.summary_model(
            inner, policy_model=policy_model, session_model=session.model
        ),
        instructions=run.instructions,
        retain_last_turns=run.retain_last_turns,
        summary_input_tokens=policy.get("summary_input_max_tokens")
        or max(1_000, effective - summary_max - SUMMARY_PROMPT_MARGIN),
    )
    timed = summarizers.TimedSummarizer(inner)
    counter = TokenCounter(accounting.tokenizer_of(session), accounting.estimate_config_of(session))
    target = target_tokens(session, state, chain)
    fixed = state.budget.system_prompt + state.budget.skill_prompts + state.budget.tool_descriptions
    cached = selectors.state_of(session)
    sandwich_state = None
    if cached is not None and cached.range_start is not None and cached.range_end is not None:
        sandwich_state = ContextState(
            strategy=cached.strategy,
            summary=cached.summary,
            summary_range=(cached.range_start, cached.range_end),
        )
    ctx = StrategyContext(
        counter=counter,
        config=config,
        summarizer=timed,
        target_tokens=target,
        room_tokens=room_tokens(session, state, chain),
        force=run.forced,
        reason="overflow" if run.trigger == Trigger.EMERGENCY else "budget",
        max_context_tokens=max(1, effective - fixed),
        limit_tokens=limit_tokens(session, state),
        # docs/concepts/compaction.md#compression-not-needed: forcing the sandwich alone on a
        # conversation too short to compress is an error the caller sees (409), not a silent no-op.
        strict=run.forced and chain == ("sandwich",),
        sandwich_state=sandwich_state,
        transcript=(
            (lambda: selectors.transcript_messages(session, through_seq=through))
            if "sandwich" in chain
            else None
        ),
    )
    if policy.get("summary_reuse_cache", True):
        ctx.context_parts = _context_parts(session, [*head, *messages])
    load_ms = (time.perf_counter() - t0) * 1000
    result = run_chain(window, chain, ctx)
    retention: dict[str, Any] | None = None
    score: float | None = None
    if result.changed:
        report = _retention(window, result.window, recall_searchable(session))
        retention, score = report.to_dict(), report.score
    return CompactionPlan(
        through_seq=through,
        base=base,
        window=window,
        result=result,
        counter=counter,
        target=target,
        # The model that wrote the summary, as the summariser reports it.
        model=timed.models[-1][:200] if timed.models else "",  # the column's length
        summarizer=timed,
        retention=retention,
        retention_score=score,
        load_ms=load_ms,
        compute_ms=(time.perf_counter() - t0) * 1000 - load_ms,
        cost=run_cost(
            before=window,
            result=result,
            summarizer=timed,
            counter=counter,
            decision=plan_decision(session, state, chain),
        ),
    )


def _context_parts(session: Session, messages: list[EngineMessage]) -> ContextParts | None:
    """The session's context as its calls send it (the cached prefix a summary re-reads)."""
    try:
        tools = plan_tools(session, messages)
        _, parts, _ = build_context(session, "anthropic", messages, tools)
    except Exception:  # noqa: BLE001 - the summary can still be written from the messages
        return None
    # A session over its limit builds in final mode (the final-report tool alone,
    # so calls and results would be rendered differently too), but the agent's
    # last call, the prefix the provider cached, sent the session's own tools:
    # the summary call re-sends those, or it reads nothing from the cache.
    return replace(parts, tools=tools.tools, final_instruction=None)


def _retention(
    before: Window, after: Window, searchable: Callable[[Sequence[str]], set[str]] | None
) -> RetentionReport:
    """Key facts of what the compaction removed or rewrote, checked against the new window."""
    # A sandwich's head is kept as messages: it is part of the new window.
    live = [*after.head, *after.messages]
    kept = {m.seq: m for m in live if m.seq is not None}
    compacted: list[EngineMessage] = []
    if (before.retain, before.summary) != (after.retain, after.summary):
        compacted.extend(before.preamble())
    for msg in (*before.head, *before.messages):
        new = kept.get(msg.seq)
        if new is None or view_key(new) != view_key(msg):
            compacted.append(msg)
    facts = extract_key_facts(compacted)
    return check_retention(
        facts, WindowText.of(after.retain, after.summary, live), searchable=searchable
    )
