"""Tool clearing: old tool results replaced by their ref
(docs/concepts/compaction.md#tool-clearing).

The knobs follow Anthropic's ``clear_tool_uses`` context edit and
docs/concepts/compaction.md#tool-clearing: keep the N newest results (``keep_tool_uses``) or clear
the oldest half (``clear_mode="oldest_half"``); leave results under ``clear_min_bytes``
alone; with ``adaptive_keep`` keep more in error-heavy or tool-dense
stretches and keep error results longer; the note names the original size.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.pairing import pair_tool_calls
from contextsvc.engine.providers.common import take_meta
from contextsvc.engine.strategies.base import (
    CompactionConfig,
    StrategyContext,
    StrategyOutcome,
    TokenCounter,
    Window,
    make_outcome,
)

CLEARED_VIEW = "[tool output cleared; ref={ref}; was {size:,} bytes]"
CLEARED_VIEW_NO_REF = "[tool output cleared; was {size:,} bytes]"
# How a tool error starts when the provider did not flag it (Claude Code's
# own errors, a Python traceback, a shell's "error:").
ERROR_PREFIXES = ("<tool_use_error>", "error:", "error ", "traceback (most recent call last)")


def original_bytes(msg: Message) -> int:
    """The output's size before any view: the stored content, else the view."""
    return len((msg.text or msg.context_text).encode("utf-8"))


def view_bytes(msg: Message) -> int:
    """What the result costs in the context now (what clearing would free)."""
    return len(msg.context_text.encode("utf-8"))


def cleared_view(ref: str | None, size: int = 0) -> str:
    return CLEARED_VIEW.format(ref=ref, size=size) if ref else CLEARED_VIEW_NO_REF.format(size=size)


def clear_output(msg: Message, counter: TokenCounter) -> Message:
    view = cleared_view(msg.output_ref, original_bytes(msg))
    return counter.recount(replace(msg, view=view, view_state="cleared"))


def is_error_result(msg: Message) -> bool:
    """A tool result that reports a failure (``is_error`` from the provider, or its text)."""
    if take_meta(msg.content)[1].get("is_error"):
        return True
    return msg.text.lstrip()[:40].lower().startswith(ERROR_PREFIXES)


def kept_results(msgs: list[Message], tool_at: list[int], cfg: CompactionConfig) -> set[int]:
    """Indices of the tool results clearing leaves alone, whatever their size.

    ``keep_recent``: the ``keep_tool_uses`` newest. ``oldest_half``: the newer
    half (the older half is what may go). ``adaptive_keep`` doubles the count
    in an error-heavy stretch (half the recent results failed: the agent is
    debugging and re-reads them) and again in a tool-dense one (the last turn
    ran ``dense_tool_uses`` tools or more), and keeps each error result for
    ``error_keep_factor`` times as long as a plain one.
    """
    total = len(tool_at)
    if cfg.clear_mode == "oldest_half":
        n = total - total // 2
    else:
        n = cfg.keep_tool_uses
    if cfg.adaptive_keep and total:
        recent = tool_at[-max(2 * n, 2) :]
        if 2 * sum(1 for i in recent if is_error_result(msgs[i])) >= len(recent):
            n *= 2
        last_user = max((i for i, m in enumerate(msgs) if m.role == "user"), default=-1)
        if sum(1 for i in tool_at if i > last_user) >= cfg.dense_tool_uses:
            n *= 2
    keep = set(tool_at[max(0, total - n) :]) if n else set()
    if cfg.adaptive_keep and n:
        longer = tool_at[max(0, total - n * cfg.error_keep_factor) :]
        keep.update(i for i in longer if is_error_result(msgs[i]))
    return keep


def clear_inputs(msg: Message, counter: TokenCounter) -> Message:
    calls = tuple(ToolCall(id=c.id, name=c.name, arguments={}) for c in msg.tool_calls)
    # view_state "cleared" on an assistant message marks its call inputs as cleared.
    return counter.recount(replace(msg, tool_calls=calls, view_state="cleared"))


def tool_clearing(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """Replace old tool results by their ref (docs/concepts/compaction.md#tool-clearing; context
    editing).

    The results ``kept_results`` names stay; results of ``exclude_tools`` and
    results under ``clear_min_bytes`` are never cleared; unless forced, clearing goes oldest
    first and stops once the window is under the target — but never clears
    less than ``clear_at_least`` tokens (a cleared prefix invalidates the
    provider's prompt cache, so it must be worth it), and clears nothing when
    that much cannot be freed.
    """
    cfg = ctx.config
    counter = ctx.counter
    msgs = list(window.messages)
    tool_at = [i for i, m in enumerate(msgs) if m.role == "tool"]
    keep = kept_results(msgs, tool_at, cfg)
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
            or view_bytes(msg) < cfg.clear_min_bytes
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
        "mode": cfg.clear_mode,
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
    return make_outcome("tool_clearing", window, window.with_messages(msgs), ctx, details)
