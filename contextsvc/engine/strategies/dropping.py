"""Dropping the oldest turns: spec 003's emergency compression and its single-turn fallback."""

from __future__ import annotations

from dataclasses import replace

from contextsvc.engine.messages import Message
from contextsvc.engine.strategies.base import StrategyContext, StrategyOutcome, Window, make_outcome
from contextsvc.engine.strategies.clearing import clear_inputs, clear_output
from contextsvc.engine.strategies.cuts import open_call_floor, snap_cut
from contextsvc.engine.turns import turn_spans, unsafe_cuts

DROPPED_ASSISTANT_VIEW = "[assistant message omitted by emergency compression]"
TRUNCATED_NOTICE = (
    "\n[… truncated by emergency compression; the full message is kept in the transcript"
    " (seq {seq})]"
)


def compression_note(*, messages: int, turns: int, tokens: int, reason: str, fallback: bool) -> str:
    why = (
        "after the provider reported the context too long"
        if reason == "overflow"
        else "to fit the context window"
    )
    what = (
        "only the most recent user message was kept in full"
        if fallback
        else f"{turns} oldest turn{'s' if turns != 1 else ''} ({messages} messages) dropped"
    )
    return (
        f"[Context compressed {why}: {what}, about {tokens:,} tokens. The full transcript is kept;"
        " earlier details may be missing from this context.]"
    )


def _single_turn_fallback(msgs: list[Message], ctx: StrategyContext) -> tuple[list[Message], int]:
    """spec 003: one turn with no safe split — keep only the most recent user message.

    Turn atomicity is broken on purpose (to leave a context-exceeded loop),
    but not pairing: what follows the user message stays as placeholders
    (cleared outputs, cleared inputs, omitted assistant text), so no result
    ever loses its call, and calls still waiting for results stay valid.
    """
    counter = ctx.counter
    floor = open_call_floor(msgs)
    unsafe = unsafe_cuts(msgs)
    users = [i for i, m in enumerate(msgs) if m.role == "user" and i <= floor and not unsafe[i]]
    cut = users[-1] if users else 0
    kept = list(msgs[cut:])
    for i, msg in enumerate(kept):
        if msg.role == "tool" and msg.view_state != "cleared":
            new = clear_output(msg, counter)
        elif msg.role == "assistant":
            new = msg
            if any(c.arguments for c in msg.tool_calls):
                new = clear_inputs(new, counter)
            if new.context_text.strip() and counter.text(new.context_text) > counter.text(
                DROPPED_ASSISTANT_VIEW
            ):
                new = counter.recount(
                    replace(new, view=DROPPED_ASSISTANT_VIEW, view_state="cleared")
                )
        else:
            continue
        if counter.message(new) < counter.message(msg):
            kept[i] = new
    # The user message itself, when it alone is past the target (a huge paste).
    if kept and kept[0].role == "user" and ctx.target_tokens > 0:
        total = Window(kept, "", "").tokens(counter)
        user = kept[0]
        if total > ctx.target_tokens and counter.message(user) > ctx.target_tokens // 2:
            keep_chars = max(200, (ctx.target_tokens // 2) * 3)
            text = user.context_text[:keep_chars] + TRUNCATED_NOTICE.format(seq=user.seq)
            kept[0] = counter.recount(replace(user, view=text, view_state="cut"))
    return kept, cut


def drop_oldest_turns(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """spec 003 forceCompression: drop the oldest ~50 % of turns at a safe boundary."""
    msgs = list(window.messages)
    counter = ctx.counter
    if not msgs:
        return make_outcome("drop_oldest_turns", window, None, ctx, {"skipped": "no messages"})
    spans = turn_spans(msgs)
    cut = 0
    if len(spans) >= 2:
        drop = max(1, len(spans) // 2)
        cut = snap_cut(msgs, spans[drop][0], ceiling=open_call_floor(msgs))
    fallback = cut == 0
    if fallback:
        kept, cut = _single_turn_fallback(msgs, ctx)
    else:
        kept = msgs[cut:]
    dropped = msgs[:cut]
    dropped_turns = sum(1 for s, _ in spans if s < cut)
    freed = counter.messages(msgs) - counter.messages(kept)
    note = compression_note(
        messages=len(dropped),
        turns=dropped_turns,
        tokens=freed,
        reason=ctx.reason,
        fallback=fallback,
    )
    summary = f"{window.summary}\n\n{note}" if window.summary else note
    details = {
        "dropped_messages": len(dropped),
        "dropped_turns": dropped_turns,
        "fallback": fallback,
        "freed_tokens": freed,
    }
    return make_outcome(
        "drop_oldest_turns", window, Window(kept, window.retain, summary), ctx, details
    )
