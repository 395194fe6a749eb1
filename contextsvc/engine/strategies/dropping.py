"""Dropping the oldest turns: the emergency path and its single-turn fallback
(docs/concepts/compaction.md#emergency).

docs/concepts/compaction.md#emergency drops the oldest ~50 % of the turns. After the
provider reported an overflow (``reason == "overflow"``, docs/concepts/compaction.md#overflow)
the path must also *make progress*: it keeps
dropping turns down to the newest user message until the window fits, and
when one turn alone is too big it breaks turn atomicity as the last
resort (docs/concepts/compaction.md#single-turn-fallback) — never between a call and its results:

1. drop the middle iterations of the newest turn (its user message and the
   newest iterations that fit stay; ``cuts.iteration_cut``);
2. cut the view of its largest tool results to head + tail, the newest output
   last and only when the rest cannot make room (an agent that finds its
   newest result gone repeats the call and loops: Claude Code does);
3. cut the user message itself (a huge paste).

Inside the newest turn it aims at the hard limit (``limit_tokens``), never at
the lower hysteresis target. The compression note goes into the summary; when
on a tiny history the note would cost more than what was dropped, a shorter
one (or none) is used, so the window always shrinks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from contextsvc.engine.messages import Message
from contextsvc.engine.strategies.base import (
    StrategyContext,
    StrategyOutcome,
    TokenCounter,
    Window,
    make_outcome,
)
from contextsvc.engine.strategies.cuts import iteration_cut, open_call_floor, snap_cut
from contextsvc.engine.turns import is_safe_boundary, turn_spans, unsafe_cuts

TRUNCATED_NOTICE = (
    "\n[… truncated by emergency compression; the full message is kept in the transcript"
    " (seq {seq})]"
)
HEAD_TAIL_NOTICE = (
    "\n[… {omitted:,} characters cut from the middle by emergency compression;"
    " read them with tool_output_cache ref={ref} …]\n"
)
TASK_HEADER = "[The user's message that started the current turn (seq {seq}), kept verbatim]"
# A cut tool result keeps at least this many tokens of head + tail.
MIN_CUT_VIEW_TOKENS = 200


def compression_note(
    *,
    messages: int,
    turns: int,
    tokens: int,
    reason: str,
    fallback: bool,
    inner: int = 0,
) -> str:
    why = (
        "after the provider reported the context too long"
        if reason == "overflow"
        else "to fit the context window"
    )
    parts = []
    if turns or (messages - inner):
        parts.append(
            f"{turns} oldest turn{'s' if turns != 1 else ''} ({messages - inner} messages) dropped"
        )
    if inner:
        parts.append(f"{inner} earlier messages of the current turn dropped")
    if fallback:
        parts.append("the most recent user message and the newest steps were kept")
    what = "; ".join(parts) or "long messages cut"
    return (
        f"[Context compressed {why}: {what}, about {tokens:,} tokens. The full transcript is kept;"
        " earlier details may be missing from this context.]"
    )


def short_note(messages: int) -> str:
    return f"[Context compressed: {messages} earlier messages dropped.]"


def _fit_chars(make: Callable[[int], Message], tokens: int, counter: TokenCounter) -> Message:
    """``make(chars)`` for the most characters (from ~3 a token) whose message
    fits ``tokens``; a few proportional steps, as text varies in density."""
    chars = max(0, tokens) * 3
    msg = make(chars)
    for _ in range(4):
        got = counter.message(msg)
        if got <= tokens or chars <= 200:
            break
        chars = max(200, int(chars * tokens / got * 0.95))
        msg = make(chars)
    return msg


def head_tail(msg: Message, keep_tokens: int, counter: TokenCounter) -> Message:
    """``msg`` with a view of its first and last characters around a notice (view "cut")."""
    text = msg.context_text
    if counter.message(msg) <= keep_tokens:
        return msg

    def make(chars: int) -> Message:
        head, tail = text[: chars // 2], text[len(text) - chars // 2 :]
        omitted = len(text) - len(head) - len(tail)
        notice = HEAD_TAIL_NOTICE.format(omitted=omitted, ref=msg.output_ref)
        return counter.recount(replace(msg, view=f"{head}{notice}{tail}", view_state="cut"))

    new = _fit_chars(make, keep_tokens, counter)
    return new if counter.message(new) < counter.message(msg) else msg


def truncate_user(msg: Message, keep_tokens: int, counter: TokenCounter) -> Message:
    """A huge user message cut to its start (the task is stated first)."""
    text = msg.context_text
    if counter.message(msg) <= keep_tokens:
        return msg

    def make(chars: int) -> Message:
        view = text[:chars] + TRUNCATED_NOTICE.format(seq=msg.seq)
        return counter.recount(replace(msg, view=view, view_state="cut"))

    new = _fit_chars(make, keep_tokens, counter)
    return new if counter.message(new) < counter.message(msg) else msg


def _turn_cut(msgs: list[Message], goal: int | None, spare: int, ctx: StrategyContext) -> int:
    """docs/concepts/compaction.md#emergency: drop the oldest ~half of the turns; after an overflow,
    keep going (whole turns, down to the newest user message) until the rest fits ``goal``."""
    spans = turn_spans(msgs)
    if len(spans) < 2:
        return 0
    floor = open_call_floor(msgs)
    cut = snap_cut(msgs, spans[max(1, len(spans) // 2)][0], ceiling=floor)
    if not cut or ctx.reason != "overflow" or goal is None:
        return cut
    unsafe = unsafe_cuts(msgs)
    later = [s for s, _ in spans if cut < s <= floor and s < len(msgs) and not unsafe[s]]
    suffix = ctx.counter.messages(msgs[cut:])
    at = cut
    for start in later:
        if suffix + spare <= goal:
            break
        suffix -= ctx.counter.messages(msgs[at:start])
        at = start
    return at


def _shrink_turn(
    kept: list[Message], soft: int, hard: int, spare: int, ctx: StrategyContext
) -> tuple[list[Message], int]:
    """Fit one oversized turn: older iterations and older outputs' views aim at
    ``soft`` (the target); the newest output and the user message are cut only
    while over ``hard`` (the limit: they really cannot fit otherwise).

    Returns the new messages and how many of the turn's messages were dropped.
    """
    counter = ctx.counter
    total = counter.messages(kept) + spare
    if total <= soft:
        return kept, 0
    dropped = 0
    lead = 1 if kept and kept[0].role == "user" else 0
    budget = soft - spare - counter.messages(kept[:lead])
    inner = iteration_cut(kept, 0, budget, counter) if len(kept) > 1 else 0
    if inner > lead and is_inner_cut_ok(kept, inner):
        dropped = inner - lead
        kept = [*kept[:lead], *kept[inner:]]
        total = counter.messages(kept) + spare
    # Largest tool results first; the newest output last of all, against the hard limit.
    tools = [i for i, m in enumerate(kept) if m.role == "tool" and m.view_state != "cleared"]
    newest = tools[-1] if tools else None
    order = [(i, soft) for i in sorted(tools[:-1], key=lambda i: -counter.message(kept[i]))]
    if newest is not None:
        order.append((newest, hard))
    for i, goal in order:
        if total <= goal:
            continue
        size = counter.message(kept[i])
        new = head_tail(kept[i], max(MIN_CUT_VIEW_TOKENS, size - (total - goal)), counter)
        total -= size - counter.message(new)
        kept[i] = new
    if total > hard and lead:
        kept[0] = truncate_user(kept[0], hard - (total - counter.message(kept[0])), counter)
    return kept, dropped


def lift_task(retain: str, user: Message) -> str:
    """The retain with the turn's user message appended: the live window is one
    run of seqs, so a user message kept while the iterations after it went
    travels in the retain (sent first, as a user message)."""
    task = f"{TASK_HEADER.format(seq=user.seq)}\n{user.context_text}"
    return f"{retain}\n\n{task}" if retain else task


def is_inner_cut_ok(kept: list[Message], inner: int) -> bool:
    """The kept iterations start at an assistant message no call/result pair straddles."""
    return kept[inner].role == "assistant" and not unsafe_cuts(kept)[inner]


def drop_oldest_turns(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """docs/concepts/compaction.md#emergency: drop the oldest ~50 % of turns at a safe boundary,
    and after an overflow as much more as the window needs (module doc)."""
    msgs = list(window.messages)
    counter = ctx.counter
    if not msgs:
        return make_outcome("drop_oldest_turns", window, None, ctx, {"skipped": "no messages"})
    limit = ctx.limit_tokens if ctx.limit_tokens is not None else ctx.max_context_tokens
    goal = ctx.target_tokens if ctx.target_tokens > 0 else limit
    if ctx.reason == "overflow" and ctx.room_tokens:
        # The deep target is the summariser's goal; dropping turns loses them
        # outright, so after an overflow it only has to get the window back
        # into the history room (the bound, as in the chain).
        goal = max(goal, ctx.room_tokens)
    # What the summary with the note (and a retain carrying the task's header,
    # should the task be lifted into it) will cost, reserved up front.
    draft = compression_note(  # the longest the note can be: every part, large figures
        messages=199_999,
        turns=99_999,
        tokens=99_999_999,
        reason=ctx.reason,
        fallback=True,
        inner=99_999,
    )
    lifted = lift_task(window.retain, Message(role="user", content="", seq=10**9))
    spare = counter.messages(
        Window(
            [], lifted, f"{window.summary}\n\n{draft}", search_hint=window.search_hint
        ).preamble()
    )
    # A sandwich's head (docs/concepts/compaction.md#sandwich-head) stays and costs its tokens, like
    # the preamble; after an overflow, one that takes over half the limit cannot stay: its
    # messages become the oldest turns, dropped first.
    head = list(window.head)
    head_tokens = counter.messages(head)
    if head and ctx.reason == "overflow" and limit is not None and head_tokens > limit // 2:
        msgs, head, head_tokens = [*head, *msgs], [], 0
    spare += head_tokens
    before = counter.messages(msgs)
    cut = _turn_cut(msgs, goal, spare, ctx)
    fallback = cut == 0
    if fallback:
        # No whole turn can go: keep from the newest user message that is a safe cut.
        floor = open_call_floor(msgs)
        users = [
            i
            for i, m in enumerate(msgs)
            if m.role == "user" and i <= floor and is_safe_boundary(msgs, i)
        ]
        cut = users[-1] if users else 0
    kept = list(msgs[cut:])
    hard = goal if limit is None else limit
    soft = goal
    if (
        ctx.reason == "overflow"
        and cut == 0
        and (hard is None or counter.messages(kept) + spare <= hard)
    ):
        # The provider said too long while our count says it fits: we undershoot.
        # Halve what is left (about half, docs/concepts/compaction.md#emergency) rather than resend
        # the same request.
        soft = hard = (counter.messages(kept) + spare) // 2
    inner = 0
    # Breaking turn atomicity is for one turn alone (the last resort
    # (docs/concepts/compaction.md#single-turn-fallback)): with whole turns still kept, the cut
    # stays at a turn start.
    if hard is not None and len(turn_spans(kept)) <= 1:
        soft = hard if soft is None else min(soft, hard)
        kept, inner = _shrink_turn(kept, max(0, soft), max(0, hard), spare, ctx)
    retain = window.retain
    if inner and kept and kept[0].role == "user":
        retain = lift_task(retain, kept[0])
        kept = kept[1:]
    # Turn atomicity was broken: iterations dropped or views cut inside the turn.
    fallback = fallback or inner > 0 or kept != msgs[len(msgs) - len(kept) :]
    dropped = cut + inner
    spans = turn_spans(msgs)
    dropped_turns = sum(1 for s, _ in spans if s < cut and msgs[s].role == "user")
    freed = before - counter.messages(kept)
    details = {
        "dropped_messages": dropped,
        "dropped_turns": dropped_turns,
        "dropped_in_turn": inner,
        "cut_views": sum(1 for m in kept if m.view_state == "cut")
        - sum(1 for m in msgs[cut:] if m.view_state == "cut"),
        "fallback": fallback,
        "freed_tokens": freed,
    }
    note = compression_note(
        messages=dropped,
        turns=dropped_turns,
        tokens=freed,
        reason=ctx.reason,
        fallback=fallback,
        inner=inner,
    )
    # A tiny history: the full note may cost more than what went. Fall back
    # to a short note, then to none, so the window always shrinks.
    before_tokens = window.tokens(counter)
    for kind, text in (("full", note), ("short", short_note(dropped)), ("none", "")):
        details["note"] = kind
        summary = (
            f"{window.summary}\n\n{text}" if window.summary and text else (text or window.summary)
        )
        new = Window(kept, retain, summary, head=head, search_hint=window.search_hint)
        if new.tokens(counter) < before_tokens:
            break
    return make_outcome("drop_oldest_turns", window, new, ctx, details)
