"""The sandwich strategy: top and bottom kept, the middle compressed and cached
(docs/concepts/compaction.md#sandwich)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextsvc.engine.errors import CompressionNotNeededError, EngineValidationError
from contextsvc.engine.messages import Message
from contextsvc.engine.strategies.base import (
    ContextState,
    StrategyContext,
    StrategyOutcome,
    TokenCounter,
    Window,
    check_nonneg_int,
    make_outcome,
)
from contextsvc.engine.strategies.cuts import open_call_floor
from contextsvc.engine.strategies.summary import fit_summary_input
from contextsvc.engine.summarize import (
    SANDWICH_SUMMARY_FORMAT,
    PromptConfig,
    Summarizer,
    SummarizerError,
    SummaryResult,
    make_compress_request,
)
from contextsvc.engine.turns import unsafe_cuts

DEFAULT_PROMPTS = PromptConfig()
# The compression prompt (docs/concepts/compaction.md#compression-prompt) names four things to
# preserve; asked for as sections, a later compression (and the agent) finds each kind in one place.
SECTIONS_INSTRUCTION = """Structure the summary under these headings, in this order (write "none" under an empty one):
## Key facts and decisions
## Context needed to continue
## User preferences and requirements
## Commitments and action items"""


def _check_limit(max_context_tokens: int) -> None:
    if (
        isinstance(max_context_tokens, bool)
        or not isinstance(max_context_tokens, int)
        or max_context_tokens <= 0
    ):
        # docs/concepts/context-build.md#limit-validation.
        raise EngineValidationError(
            "Context limit must be positive",
            field="max_context_tokens",
            details={"max_context_tokens": max_context_tokens},
        )


@dataclass(slots=True)
class ContextResult:
    """docs/concepts/compaction.md#sandwich, plus where the kept top ends and the bottom starts."""

    messages: list[Message]
    summary_used: bool
    tokens_used: int
    new_state: ContextState | None
    summary: str = ""
    top_end: int = 0
    bottom_start: int = 0


class SandwichStrategy:
    """The sandwich (docs/concepts/compaction.md#sandwich): keep the beginning and the end, compress
    the middle.

    Message counts are snapped to safe cuts: the top grows (to a near next
    turn start where the middle allows) and the bottom grows until no call is
    separated from its result (so "top 5 / bottom 5 always preserved" holds
    with at least 5 each). ``incremental``: when the
    cached summary covers the start of a middle that has grown, only the new
    messages are compressed, with the cached summary in front of them.
    """

    name = "sandwich"

    def __init__(
        self,
        *,
        counter: TokenCounter,
        preserve_top: int = 5,
        preserve_bottom: int = 5,
        compression_threshold: float = 0.7,
        prompts: PromptConfig = DEFAULT_PROMPTS,
        model: str = "",
        max_tokens: int = 4096,
        summary_input_tokens: int | None = None,
        incremental: bool = False,
        min_middle: int = 1,
        sections: bool = False,
    ) -> None:
        self.counter = counter
        self.preserve_top = check_nonneg_int(preserve_top, "preserve_top")
        self.preserve_bottom = check_nonneg_int(preserve_bottom, "preserve_bottom")
        if not 0 < compression_threshold <= 1:
            raise EngineValidationError(
                "compression_threshold must be in (0, 1]", field="compression_threshold"
            )
        self.compression_threshold = compression_threshold
        self.prompts = prompts
        self.model = model
        self.max_tokens = max_tokens
        self.summary_input_tokens = summary_input_tokens
        self.incremental = incremental
        self.min_middle = check_nonneg_int(min_middle, "sandwich_min_middle")
        self.sections = sections
        self.llm_calls: list[SummaryResult] = []

    def estimate(self, messages: Sequence[Message]) -> int:
        return self.counter.messages(messages)

    def needs_compression(self, messages: Sequence[Message], max_context_tokens: int) -> bool:
        _check_limit(max_context_tokens)
        threshold = math.floor(max_context_tokens * self.compression_threshold)
        return self.estimate(messages) > threshold and not self.too_short(messages)

    def too_short(self, messages: Sequence[Message]) -> bool:
        """docs/concepts/compaction.md#compression-not-needed: no middle of at least ``min_middle``
        messages between the preserved top and bottom (snapped to safe cuts)."""
        if len(messages) <= self.preserve_top + self.preserve_bottom:
            return True
        top_end, bottom_start = self.ranges(messages)
        return bottom_start - top_end < max(1, self.min_middle)

    def ranges(self, messages: Sequence[Message]) -> tuple[int, int]:
        """(top_end, bottom_start): the middle is ``messages[top_end:bottom_start]``."""
        n = len(messages)
        unsafe = unsafe_cuts(messages)
        top_end = min(self.preserve_top, n)
        while top_end < n and unsafe[top_end]:
            top_end += 1
        bottom_start = min(max(n - self.preserve_bottom, 0), open_call_floor(messages))
        while bottom_start > 0 and unsafe[bottom_start]:
            bottom_start -= 1
        # The head, sent as messages, ends at a turn start where it can
        # (docs/concepts/context-build.md#turns: a user message no call / result pair straddles):
        # whole turns, no question whose answer is in the summary. Only a near one: within
        # ``preserve_top`` more messages (an agent's first turn can be hundreds
        # of tool calls long, and the head is never compressed) and leaving a
        # middle worth compressing; otherwise the call/result-safe cut stands.
        turn, reach = top_end, min(n, top_end + max(1, self.preserve_top))
        while turn < reach and (unsafe[turn] or messages[turn].role != "user"):
            turn += 1
        at_turn = turn < n and messages[turn].role == "user" and not unsafe[turn]
        if at_turn and bottom_start - turn >= max(1, self.min_middle):
            top_end = turn
        return top_end, bottom_start

    def is_valid(self, state: ContextState | None, messages: Sequence[Message]) -> bool:
        """docs/concepts/compaction.md#sandwich-cache: the range starts after the top and ends
        before the bottom."""
        if state is None or state.strategy != self.name:
            return False
        return tuple(state.summary_range) == self.ranges(messages)

    def compress(self, messages: Sequence[Message], summarizer: Summarizer | None) -> str:
        """docs/concepts/context-build.md#validation (CX-NT2: empty input is a validation error)."""
        source, _ = fit_summary_input(messages, self.summary_input_tokens, self.counter)
        request = make_compress_request(
            source, self.prompts, model=self.model, max_tokens=self.max_tokens
        )
        if self.sections:
            request = replace(request, prompt=with_sections(request.prompt))
        if summarizer is None:
            raise SummarizerError("No summariser is configured", transient=False)
        result = summarizer.complete(request)
        self.llm_calls.append(result)
        text = result.text.strip()
        if not text:
            raise SummarizerError("The summariser returned an empty summary", transient=False)
        return text

    def summary_message(self, summary: str) -> Message:
        # The sandwich's summary is a system message
        # (docs/concepts/context-build.md#summary-placement); a history never carries one
        # (docs/concepts/context-build.md#turns), so it travels as the summary slot: a user message.
        return Message(role="user", content=SANDWICH_SUMMARY_FORMAT.format(summary=summary))

    def build_context(
        self,
        messages: Sequence[Message],
        cached_summary: ContextState | None,
        max_context_tokens: int,
        *,
        summarizer: Summarizer | None = None,
        force: bool = False,
        strict: bool = False,
    ) -> ContextResult:
        """docs/concepts/compaction.md#sandwich. ``strict`` (a forced compression of the sandwich
        alone): a conversation too short to compress raises
        ``CompressionNotNeededError`` instead of coming back whole."""
        _check_limit(max_context_tokens)
        if not messages:
            raise EngineValidationError("Conversation has no messages", field="messages")
        if strict and self.too_short(messages):
            top_end, bottom_start = self.ranges(messages)
            raise CompressionNotNeededError(
                f"The conversation is too short to compress: {len(messages)} messages, with "
                f"{self.preserve_top} kept at the top, {self.preserve_bottom} at the bottom and "
                f"at least {max(1, self.min_middle)} needed in between",
                field="messages",
                details={
                    "messages": len(messages),
                    "preserve_top": self.preserve_top,
                    "preserve_bottom": self.preserve_bottom,
                    "min_middle": max(1, self.min_middle),
                    "middle": max(0, bottom_start - top_end),
                },
            )
        full = ContextResult(
            messages=list(messages),
            summary_used=False,
            tokens_used=self.estimate(messages),
            new_state=None,
            top_end=len(messages),
            bottom_start=len(messages),
        )
        if self.too_short(messages):
            return full
        if not force and not self.needs_compression(messages, max_context_tokens):
            return full
        top_end, bottom_start = self.ranges(messages)
        new_state: ContextState | None = None
        if self.is_valid(cached_summary, messages):
            assert cached_summary is not None
            summary = cached_summary.summary
        else:
            middle = list(messages[top_end:bottom_start])
            if (
                self.incremental
                and cached_summary is not None
                and cached_summary.strategy == self.name
                and cached_summary.summary_range[0] == top_end
                and top_end < cached_summary.summary_range[1] < bottom_start
            ):
                covered = cached_summary.summary_range[1]
                middle = [
                    self.summary_message(cached_summary.summary),
                    *messages[covered:bottom_start],
                ]
            summary = self.compress(middle, summarizer)
            new_state = ContextState(
                strategy=self.name, summary=summary, summary_range=(top_end, bottom_start)
            )
        out = [*messages[:top_end], self.summary_message(summary), *messages[bottom_start:]]
        return ContextResult(
            messages=out,
            summary_used=True,
            tokens_used=self.estimate(out),
            new_state=new_state,
            summary=summary,
            top_end=top_end,
            bottom_start=bottom_start,
        )


def with_sections(prompt: str) -> str:
    """The compression prompt with the sections instruction before the conversation."""
    marker = "\n\nConversation:\n"
    if marker in prompt:
        head, rest = prompt.split(marker, 1)
        return f"{head}\n\n{SECTIONS_INSTRUCTION}{marker}{rest}"
    return f"{prompt}\n\n{SECTIONS_INSTRUCTION}"


def sandwich(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """docs/concepts/compaction.md#sandwich on the whole conversation, written back as a window:
    the top as the window's head (real messages, sent before the summary as
    they were posted), the middle's summary as summary, the bottom live."""
    cfg = ctx.config
    live = [*window.head, *window.messages]
    if ctx.transcript is not None:
        # The live views win (a cleared or cut output stays as the window has it).
        by_seq = {m.seq: m for m in live if m.seq is not None}
        conversation = [by_seq.get(m.seq, m) for m in ctx.transcript()]
    else:
        conversation = live
    strategy = SandwichStrategy(
        counter=ctx.counter,
        preserve_top=cfg.preserve_top,
        preserve_bottom=cfg.preserve_bottom,
        compression_threshold=cfg.sandwich_threshold,
        prompts=cfg.prompts,
        model=cfg.model,
        max_tokens=cfg.summary_max_tokens,
        summary_input_tokens=cfg.summary_input_tokens,
        incremental=True,
        min_middle=cfg.sandwich_min_middle,
        sections=cfg.sandwich_sections,
    )
    if not conversation:
        return make_outcome("sandwich", window, None, ctx, {"skipped": "no messages"})
    limit = ctx.max_context_tokens or max(1, ctx.target_tokens)
    result = strategy.build_context(
        conversation,
        ctx.sandwich_state,
        limit,
        summarizer=ctx.summarizer,
        force=ctx.force,
        strict=ctx.strict,
    )
    ctx.llm_calls.extend(strategy.llm_calls)
    details: dict[str, Any] = {
        "top_end": result.top_end,
        "bottom_start": result.bottom_start,
        "cache": "none"
        if not result.summary_used
        else ("reused" if result.new_state is None else "compressed"),
    }
    if not result.summary_used:
        return make_outcome(
            "sandwich",
            window,
            None,
            ctx,
            {**details, "skipped": "under the threshold or too short"},
        )
    # The retain slot is left empty: the top travels as messages, not quoted in it.
    new = Window(
        messages=list(conversation[result.bottom_start :]),
        summary=result.summary,
        head=list(conversation[: result.top_end]),
        search_hint=window.search_hint,
    )
    state = result.new_state or ctx.sandwich_state
    return make_outcome(
        "sandwich",
        window,
        new,
        ctx,
        details,
        sandwich_state=state,
        state_changed=result.new_state is not None,
    )
