"""The ``tree`` strategy (docs/concepts/compaction.md#tree): hierarchical summaries, each chunk
summarised once.

What leaves the window is cut into chunks of ``chunk_size`` messages (a chunk
never starts with a tool result, so a call and its results stay together);
each chunk is summarised once, alone — the compression prompt
(docs/concepts/compaction.md#compression-prompt) with that chunk as its only input — into a level-1
node. When a level holds more than ``FAN_IN`` nodes, its oldest ``FAN_IN`` are summarised together
into one node of the level above (a summary of summaries); at the top level
(``levels``) they merge into one top node. A compaction therefore reads the
new chunks and, now and then, ``FAN_IN`` short summaries: never the whole
history, however long the session (O(new chunk) per compaction). The memory
is bounded by about ``FAN_IN × levels`` summaries.

The nodes live in the summary slot, oldest first, each under a header naming
its level and the seqs it covers. The header is how the next compaction finds
them again, so there is no other state to keep in step: a snapshot or a
restore carries the tree with the summary. A summary another strategy wrote
becomes one top-level node. The task stays verbatim in the retain slot (as
with ``summarize``), and what the agent pinned is appended there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextsvc.engine.messages import Message
from contextsvc.engine.strategies.base import StrategyContext, StrategyOutcome, Window, make_outcome
from contextsvc.engine.strategies.cuts import leaving_cut
from contextsvc.engine.strategies.pinning import (
    agent_pinned,
    pinned_in,
    pinned_retain,
    with_agent_pins,
)
from contextsvc.engine.strategies.summary import fit_summary_input
from contextsvc.engine.summarize import SummarizerError, make_compress_request

# Nodes of one level summarised together into one node of the next. Four keeps
# a roll-up's input (four summaries) smaller than a chunk, and the memory at
# most four summaries per level.
FAN_IN = 4
NODE_HEADER = "[Summary L{level} of messages {first}-{last}]"
_HEADER_RE = re.compile(r"^\[Summary L(\d+) of messages (\d+)-(\d+)\]$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Node:
    """One summary of the tree: its level (1: a chunk of messages) and the seqs it covers."""

    level: int
    first: int
    last: int
    text: str

    def render(self) -> str:
        return NODE_HEADER.format(level=self.level, first=self.first, last=self.last) + (
            f"\n{self.text}"
        )


def parse_tree(summary: str, levels: int, before_seq: int) -> list[Node]:
    """The nodes a summary slot holds, oldest first. Text outside any header (a
    summary another strategy wrote) is one top-level node covering the seqs
    before ``before_seq``; a level above ``levels`` (lowered since) is clamped."""
    matches = list(_HEADER_RE.finditer(summary))
    nodes: list[Node] = []
    head = summary[: matches[0].start()] if matches else summary
    if head.strip():
        nodes.append(Node(levels, 1, max(1, before_seq - 1), head.strip()))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(summary)
        level, first, last = (int(g) for g in m.groups())
        nodes.append(Node(min(level, levels), first, last, summary[m.end() : end].strip()))
    return nodes


def render_tree(nodes: Sequence[Node]) -> str:
    return "\n\n".join(n.render() for n in nodes)


def chunks(messages: Sequence[Message], size: int) -> list[list[Message]]:
    """``messages`` in chunks of about ``size``: a chunk closes at its size, but
    never right before a tool result (the result joins its call's chunk)."""
    out: list[list[Message]] = []
    cur: list[Message] = []
    for msg in messages:
        if len(cur) >= size and msg.role != "tool":
            out.append(cur)
            cur = []
        cur.append(msg)
    if cur:
        out.append(cur)
    return out


def _summarise(source: Sequence[Message], ctx: StrategyContext) -> str:
    cfg = ctx.config
    request = make_compress_request(
        source, cfg.prompts, model=cfg.model, max_tokens=cfg.summary_max_tokens
    )
    if ctx.summarizer is None:
        raise SummarizerError("No summariser is configured", transient=False)
    result = ctx.summarizer.complete(request)
    ctx.llm_calls.append(result)
    text = result.text.strip()
    if not text:
        raise SummarizerError("The summariser returned an empty summary", transient=False)
    return text


def _leaf(chunk: Sequence[Message], ctx: StrategyContext) -> Node:
    source, _ = fit_summary_input(chunk, ctx.config.summary_input_tokens, ctx.counter)
    seqs = [m.seq for m in chunk if m.seq is not None]
    return Node(1, min(seqs, default=0), max(seqs, default=0), _summarise(source, ctx))


def _merge(nodes: Sequence[Node], level: int, ctx: StrategyContext) -> Node:
    """One node of ``level`` summarising ``nodes`` (a summary of summaries)."""
    source = [Message(role="user", content=n.render()) for n in nodes]
    return Node(level, nodes[0].first, nodes[-1].last, _summarise(source, ctx))


def roll_up(nodes: list[Node], levels: int, ctx: StrategyContext) -> tuple[list[Node], int]:
    """Merge the oldest ``FAN_IN`` nodes of any level holding more than ``FAN_IN``
    into one node of the level above (the top level merges into itself).

    Nodes stay sorted by seq with levels non-increasing (a roll-up always takes
    the oldest of a level, which sit right after the higher levels), so the
    nodes of a level are contiguous. Returns the nodes and the merges done."""
    merges = 0
    for level in range(1, levels + 1):
        while True:
            at = [i for i, n in enumerate(nodes) if n.level == level]
            if len(at) <= FAN_IN:
                break
            group = at[:FAN_IN]
            merged = _merge([nodes[i] for i in group], min(level + 1, levels), ctx)
            nodes = [*nodes[: group[0]], merged, *nodes[group[-1] + 1 :]]
            merges += 1
    return nodes, merges


def tree(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """Summarise what leaves the window chunk by chunk and roll the summaries up."""
    cfg = ctx.config
    msgs = window.messages
    cut, split_turn = leaving_cut(msgs, cfg.retain_last_turns, ctx.target_tokens, ctx.counter)
    span = list(msgs[:cut])
    details: dict[str, Any] = {
        "chunk_size": cfg.chunk_size,
        "levels": cfg.levels,
        "summarised_messages": len(span),
        "kept_messages": len(msgs) - cut,
    }
    if split_turn:
        details["split_turn"] = True
    retain = window.retain
    pinned: list[Message] = []
    if cfg.pin_task and not retain and not window.summary:
        pinned = pinned_in(
            span,
            at_start=bool(msgs) and msgs[0].seq == 1,
            counter=ctx.counter,
            room=ctx.max_context_tokens,
        )
        if pinned:
            retain = pinned_retain(pinned, ctx.counter, ctx.max_context_tokens)
            details["pinned_task"] = True
    pins = agent_pinned(span)
    rest = [m for m in span if not any(m is p for p in pinned) and not m.pinned]
    if not rest:
        return make_outcome(
            "tree", window, None, ctx, {**details, "skipped": "nothing before the kept turns"}
        )
    first_seq = msgs[0].seq if msgs and msgs[0].seq is not None else 1
    nodes = parse_tree(window.summary, cfg.levels, first_seq)
    leaves = [_leaf(chunk, ctx) for chunk in chunks(rest, cfg.chunk_size)]
    nodes, merges = roll_up([*nodes, *leaves], cfg.levels, ctx)
    if pins:
        retain = with_agent_pins(retain, pins)
        details["pinned_messages"] = len(pins)
    details.update({"new_chunks": len(leaves), "merges": merges, "nodes": len(nodes)})
    details["model"] = ctx.llm_calls[-1].model if ctx.llm_calls else ""
    new = Window(list(msgs[cut:]), retain, render_tree(nodes), search_hint=window.search_hint)
    return make_outcome("tree", window, new, ctx, details)
