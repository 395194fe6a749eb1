"""Tool clearing: old tool results replaced by their ref (spec 002 chain link 1)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.pairing import pair_tool_calls
from contextsvc.engine.strategies.base import (
    StrategyContext,
    StrategyOutcome,
    TokenCounter,
    Window,
    make_outcome,
)

CLEARED_VIEW = "[tool output cleared; ref={ref}]"
CLEARED_VIEW_NO_REF = "[tool output cleared]"


def cleared_view(ref: str | None) -> str:
    return CLEARED_VIEW.format(ref=ref) if ref else CLEARED_VIEW_NO_REF


def clear_output(msg: Message, counter: TokenCounter) -> Message:
    return counter.recount(replace(msg, view=cleared_view(msg.output_ref), view_state="cleared"))


def clear_inputs(msg: Message, counter: TokenCounter) -> Message:
    calls = tuple(ToolCall(id=c.id, name=c.name, arguments={}) for c in msg.tool_calls)
    # view_state "cleared" on an assistant message marks its call inputs as cleared.
    return counter.recount(replace(msg, tool_calls=calls, view_state="cleared"))


def tool_clearing(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """Replace old tool results by their ref (spec 002 chain link 1; context editing).

    The ``keep_tool_uses`` most recent results stay; results of
    ``exclude_tools`` are never cleared; unless forced, clearing goes oldest
    first and stops once the window is under the target — but never clears
    less than ``clear_at_least`` tokens (a cleared prefix invalidates the
    provider's prompt cache, so it must be worth it), and clears nothing when
    that much cannot be freed.
    """
    cfg = ctx.config
    counter = ctx.counter
    msgs = list(window.messages)
    tool_at = [i for i, m in enumerate(msgs) if m.role == "tool"]
    keep = set(tool_at[max(0, len(tool_at) - cfg.keep_tool_uses) :])
    start_tokens = window.tokens(counter)
    freed = 0
    cleared: list[int] = []
    for i in tool_at:
        msg = msgs[i]
        if (
            i in keep
            or msg.pinned
            or msg.view_state in ("cleared", "trimmed")
            or (msg.name or "") in cfg.exclude_tools
        ):
            continue
        if (
            not ctx.force
            and start_tokens - freed <= ctx.target_tokens
            and freed >= cfg.clear_at_least
        ):
            break
        new = clear_output(msg, counter)
        saving = counter.message(msg) - counter.message(new)
        if saving <= 0:
            continue
        msgs[i] = new
        freed += saving
        cleared.append(i)
    details: dict[str, Any] = {
        "cleared": len(cleared),
        "cleared_seqs": [msgs[i].seq for i in cleared],
        "freed_tokens": freed,
        "kept_recent": len(keep),
    }
    if not cleared:
        return make_outcome(
            "tool_clearing", window, None, ctx, {**details, "skipped": "nothing to clear"}
        )
    if freed < cfg.clear_at_least:
        return make_outcome(
            "tool_clearing",
            window,
            None,
            ctx,
            {**details, "skipped": f"would free {freed} tokens, below clear_at_least"},
        )
    if cfg.clear_tool_inputs:
        # A call's inputs go once the result answering it (``engine.pairing``) is cleared.
        result_of = pair_tool_calls(msgs).result_of
        done = {call for call, r in result_of.items() if msgs[r].view_state == "cleared"}
        inputs = 0
        for i, msg in enumerate(msgs):
            if (
                msg.role == "assistant"
                and msg.tool_calls
                and msg.view_state != "cleared"
                and all((i, k) in done for k in range(len(msg.tool_calls)))
                and not any(c.name in cfg.exclude_tools for c in msg.tool_calls)
                and any(c.arguments for c in msg.tool_calls)
            ):
                new = clear_inputs(msg, counter)
                if counter.message(new) < counter.message(msg):
                    freed += counter.message(msg) - counter.message(new)
                    msgs[i] = new
                    inputs += 1
        details["cleared_inputs"] = inputs
        details["freed_tokens"] = freed
    return make_outcome(
        "tool_clearing", window, Window(msgs, window.retain, window.summary), ctx, details
    )
