"""Retain + summary of all but the last turns (docs/concepts/compaction.md#retain-summary), and
fitting its input."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from contextsvc.engine.build import ContextParts
from contextsvc.engine.messages import Message
from contextsvc.engine.strategies.base import (
    StrategyContext,
    StrategyOutcome,
    TokenCounter,
    Window,
    make_outcome,
)
from contextsvc.engine.strategies.cuts import leaving_cut
from contextsvc.engine.strategies.pinning import (
    agent_pinned,
    is_pinned_retain,
    pinned_in,
    pinned_retain,
    with_agent_pins,
)
from contextsvc.engine.summarize import (
    SummarizerError,
    SummaryResult,
    extract_retain_summary,
    make_retain_summary_request,
    strip_trailing_tool_calls,
)
from contextsvc.engine.summary_merge import (
    join_facts,
    merge_retained,
    merge_summaries,
    split_facts,
)

# The merged memory (all parts of the summary) is at most one summary long, and
# its retained facts a third of that: every compaction re-writes the memory into
# the prefix and every call re-reads it, so a longer one costs more than the
# recall it adds (bench/bench_policy.py at 32k: a memory up to two summaries
# long cost 1.3 % more than re-summarising into one, for +0.002 recall).
MEMORY_SUMMARIES = 1
FACTS_SHARE = 3
OMITTED_VIEW = "[tool output omitted from the summary input; ref={ref}]"


def fit_summary_input(
    messages: Sequence[Message], budget: int | None, counter: TokenCounter
) -> tuple[list[Message], dict[str, int]]:
    """Shrink what is sent to the summariser to ``budget`` tokens.

    Tool outputs go first (oldest first, their refs stay in the text), then
    the oldest messages. The window itself is not changed by this.
    """
    out = list(messages)
    stats = {"omitted_outputs": 0, "omitted_messages": 0}
    if budget is None:
        return out, stats
    total = counter.messages(out)
    for i, msg in enumerate(out):
        if total <= budget:
            break
        if msg.role == "tool" and msg.view_state not in ("cleared", "trimmed"):
            new = counter.recount(
                replace(
                    msg, view=OMITTED_VIEW.format(ref=msg.output_ref or "-"), view_state="cleared"
                )
            )
            total -= counter.message(msg) - counter.message(new)
            out[i] = new
            stats["omitted_outputs"] += 1
    # The first user message is usually the task itself: the one message a
    # summary must not lose. Drop from right after it.
    head = out[:1] if len(out) > 1 and out[0].role == "user" else []
    body = out[len(head) :]
    drop = 0
    while total > budget and drop < len(body) - 1:
        total -= counter.message(body[drop])
        drop += 1
    if drop:
        stats["omitted_messages"] = drop
        note = Message(
            role="user", content=f"[Earlier messages omitted from this summary input: {drop}]"
        )
        out = [*head, note, *body[drop:]]
    return out, stats


def _summary_prefix(
    ctx: StrategyContext, msgs: Sequence[Message], cut: int
) -> tuple[ContextParts | None, int]:
    """The context the summary call re-reads, and how many of its newest messages
    it must leave out of the summary. The messages the compaction keeps are not
    sent at all: the newest of them were never in a cached prefix (they arrived
    after the last call) and would be paid as fresh input for nothing."""
    prefix = ctx.context_parts
    kept = len(msgs) - cut
    if prefix is None or not kept or msgs[cut].seq is None:
        return prefix, kept
    first_kept = msgs[cut].seq
    head = [m for m in prefix.messages if m.seq is None or m.seq < first_kept]
    if not head or len(head) == len(prefix.messages):
        return prefix, kept
    return replace(prefix, messages=head), 0


def _call_summarizer(ctx: StrategyContext, request: Any) -> SummaryResult:
    if ctx.summarizer is None:
        raise SummarizerError("No summariser is configured", transient=False)
    result = ctx.summarizer.complete(request)
    ctx.llm_calls.append(result)
    return result


def summarize(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """docs/concepts/compaction.md#retain-summary: retain + summary + the last ``retain_last_turns``
    turns.

    The earlier retain and summary are part of what is summarised, so a second
    compaction folds the first one in rather than losing it.
    """
    cfg = ctx.config
    msgs = window.messages
    cut, split_turn = leaving_cut(msgs, cfg.retain_last_turns, ctx.target_tokens, ctx.counter)
    span = list(msgs[:cut])
    details: dict[str, Any] = {"summarised_messages": len(span), "kept_messages": len(msgs) - cut}
    if split_turn:
        details["split_turn"] = True
    if not span:
        return make_outcome(
            "summarize", window, None, ctx, {**details, "skipped": "nothing before the kept turns"}
        )
    keep_retain = cfg.pin_task and is_pinned_retain(window.retain)
    pinned = (
        []
        if keep_retain or not cfg.pin_task or window.retain or window.summary
        else (
            pinned_in(
                span,
                at_start=bool(msgs) and msgs[0].seq == 1,
                counter=ctx.counter,
                room=_pin_room(ctx),
            )
        )
    )
    # A pinned task stays verbatim: it is neither summarised nor sent to be.
    # Incremental (the default): the earlier compaction's memory is not sent
    # again either; the new summary covers what leaves the window now and is
    # merged with it (``engine.summary_merge``).
    incremental = cfg.incremental_summary and bool(window.retain or window.summary)
    head = (
        []
        if incremental
        else Window(
            [], "" if keep_retain else window.retain, window.summary, search_hint=window.search_hint
        ).preamble()
    )
    # What the agent pinned is kept verbatim in the retain slot, not summarised.
    pins = agent_pinned(span)
    rest = [m for m in span if not any(m is p for p in pinned) and not m.pinned]
    source, fit = fit_summary_input([*head, *rest], cfg.summary_input_tokens, ctx.counter)
    details.update({k: v for k, v in fit.items() if v})
    if not strip_trailing_tool_calls(source):
        if pinned or pins:
            # All that leaves is the task (or what the agent pinned): it moves
            # to the retain slot verbatim, with no summary call. Skipping here
            # would leave the emergency link to drop the task with its turn.
            return _pin_only(window, ctx, cut, pinned, pins, details)
        # Only a tool-calling assistant message with nothing to say:
        # docs/concepts/compaction.md#strip-trailing-calls drops it, which leaves nothing to
        # summarise.
        return make_outcome(
            "summarize", window, None, ctx, {**details, "skipped": "nothing to summarise"}
        )
    prefix, kept = _summary_prefix(ctx, msgs, cut)
    request = make_retain_summary_request(
        source,
        cfg.prompts,
        model=cfg.model,
        max_tokens=cfg.summary_max_tokens,
        prefix=prefix,
        kept=kept,
        after_memory=incremental,
        search_hint=window.search_hint,
    )
    result = _call_summarizer(ctx, request)
    retain, summary = extract_retain_summary(result.text)
    if not summary:
        raise SummarizerError("The summariser answered without a summary", transient=False)
    cap = cfg.summary_max_tokens * MEMORY_SUMMARIES
    if keep_retain or pinned:
        # The retain slot holds the task: the summariser's retained facts go
        # above its summary, marked, so the next compaction merges them too.
        old_facts, old_body = split_facts(window.summary) if incremental else ("", "")
        facts = (
            merge_retained(old_facts, retain, cfg.summary_max_tokens // FACTS_SHARE)
            if old_facts
            else retain
        )
        summary = join_facts(facts, merge_summaries(old_body, summary, cap))
        retain = (
            window.retain if keep_retain else pinned_retain(pinned, ctx.counter, _pin_room(ctx))
        )
        details["pinned_task"] = True
    elif incremental:
        retain = merge_retained(window.retain, retain, cfg.summary_max_tokens // FACTS_SHARE)
        summary = merge_summaries(window.summary, summary, cap)
    if incremental:
        details["incremental"] = True
    if pins:
        retain = with_agent_pins(retain, pins)
        details["pinned_messages"] = len(pins)
    details["model"] = result.model
    return make_outcome(
        "summarize", window, window.with_messages(list(msgs[cut:]), retain, summary), ctx, details
    )


def _pin_only(
    window: Window,
    ctx: StrategyContext,
    cut: int,
    pinned: Sequence[Message],
    pins: Sequence[Message],
    details: dict[str, Any],
) -> StrategyOutcome:
    """The span holds nothing to summarise but pinned messages: they go to the
    retain slot, the rest of the span (empty tool-calling messages) goes."""
    retain = window.retain
    if pinned:
        retain = pinned_retain(pinned, ctx.counter, _pin_room(ctx))
        details["pinned_task"] = True
    if pins:
        retain = with_agent_pins(retain, pins)
        details["pinned_messages"] = len(pins)
    details["no_summary_call"] = True
    after = window.with_messages(list(window.messages[cut:]), retain, window.summary)
    return make_outcome("summarize", window, after, ctx, details)


def _pin_room(ctx: StrategyContext) -> int | None:
    """The room a pinned task is measured against: the history room when the
    service knows it (what the window must fit), else the context limit."""
    rooms = [r for r in (ctx.room_tokens, ctx.max_context_tokens) if r is not None]
    return min(rooms) if rooms else None
