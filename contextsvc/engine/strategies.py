"""Compaction strategies and the chain that runs them (spec 000 §2, spec 002, spec 003, spec 004).

Pure: a ``Window`` (retain, summary, live messages) goes in, a new ``Window``
and a report (tokens and messages before/after) come out. The Django layer
loads the window, runs a chain here, and writes the result back.

- ``tool_clearing`` — spec 002's first link, with the knobs of Anthropic's
  context editing: keep the N most recent tool uses, ``exclude_tools``,
  ``clear_at_least``, optionally clear tool inputs. Old results become
  ``[tool output cleared; ref=…]``; the ref keeps them expandable.
- ``summarize`` — spec 000 §2.6-2.7: retain + summary of everything but the
  last ``retain_last_turns`` turns, from an LLM called without tools.
- ``sandwich`` — spec 004: top 5 / bottom 5 messages kept, the middle
  compressed, the summary cached with its ``summary_range``.
- ``drop_oldest_turns`` — spec 003's emergency path: the oldest ~50 % of the
  turns go; a single turn falls back to the most recent user message; a
  compression note goes into the summary, not into the history.

Invariants every strategy keeps (property-tested): a tool result never loses
its call (cuts go through ``find_safe_boundary`` / ``is_safe_cut``, and never
pass a call of the last turn that is still waiting for its result), the order
of messages is kept, kept messages are byte-identical, and the window never
grows: a result bigger than its input is discarded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message, ToolCall
from contextsvc.engine.summarize import (
    SANDWICH_SUMMARY_FORMAT,
    PromptConfig,
    Summarizer,
    SummarizerError,
    SummaryResult,
    extract_retain_summary,
    format_messages,
    make_compress_request,
    make_retain_summary_request,
    preamble,
    strip_trailing_tool_calls,
)
from contextsvc.engine.tokens import (
    DEFAULT_ESTIMATE_CONFIG,
    EstimateConfig,
    Tokenizer,
    estimate_message,
    estimate_text,
)
from contextsvc.engine.turns import (
    _unsafe_cuts,
    find_safe_boundary,
    last_turns_start,
    parse_turn_boundaries,
    turn_spans,
)

DEFAULT_PROMPTS = PromptConfig()
STRATEGY_NAMES: tuple[str, ...] = ("tool_clearing", "summarize", "sandwich", "drop_oldest_turns")
# DESIGN.md: tool clearing → summarise (retain + summary, last 1 turn kept) → drop oldest turns.
DEFAULT_CHAIN: tuple[str, ...] = ("tool_clearing", "summarize", "drop_oldest_turns")
EMERGENCY_STRATEGY = "drop_oldest_turns"

CLEARED_VIEW = "[tool output cleared; ref={ref}]"
CLEARED_VIEW_NO_REF = "[tool output cleared]"
OMITTED_VIEW = "[tool output omitted from the summary input; ref={ref}]"
DROPPED_ASSISTANT_VIEW = "[assistant message omitted by emergency compression]"
TRUNCATED_NOTICE = (
    "\n[… truncated by emergency compression; the full message is kept in the transcript"
    " (seq {seq})]"
)
TOP_HEADER = "[Start of the conversation, kept verbatim]"

# spec 002 §7: "When usage exceeds 80%, inject a non-cacheable note".
USAGE_NOTE_RATIO = 0.8
USAGE_NOTE = (
    "[Context: {pct}% used. You can call compact_context to free space before continuing"
    " with large operations.]"
)


# --- tokens and windows ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenCounter:
    """Counts messages the way the store does: the stored count when there is
    one (computed once at ingest), the estimate for anything rewritten."""

    tokenizer: Tokenizer
    config: EstimateConfig = DEFAULT_ESTIMATE_CONFIG

    def message(self, msg: Message) -> int:
        if msg.token_count is not None:
            return msg.token_count
        return estimate_message(msg, self.tokenizer, self.config)

    def recount(self, msg: Message) -> Message:
        """``msg`` with its token count recomputed (after a view or a call changed)."""
        msg = replace(msg, token_count=None)
        msg.token_count = estimate_message(msg, self.tokenizer, self.config)
        return msg

    def text(self, text: str) -> int:
        return estimate_text(text, self.tokenizer)

    def messages(self, messages: Sequence[Message]) -> int:
        return sum(self.message(m) for m in messages)


@dataclass(slots=True)
class Window:
    """The live context a compaction works on: retain and summary (sent first,
    as user messages) and the live messages, oldest first."""

    messages: list[Message]
    retain: str = ""
    summary: str = ""

    def preamble(self) -> list[Message]:
        return preamble(self.retain, self.summary)

    def tokens(self, counter: TokenCounter) -> int:
        return counter.messages(self.preamble()) + counter.messages(self.messages)

    def preamble_tokens(self, counter: TokenCounter) -> int:
        return counter.messages(self.preamble())

    def message_count(self) -> int:
        return len(self.preamble()) + len(self.messages)


# --- configuration -------------------------------------------------------------------


def _check_nonneg_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EngineValidationError(
            f"{name} must be a non-negative integer, got {value!r}", field=name
        )
    return value


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """spec 000 CompactionConfig + spec 004 sandwich + context-editing knobs."""

    retain_last_turns: int = 1
    keep_tool_uses: int = 3
    exclude_tools: frozenset[str] = frozenset()
    clear_at_least: int = 0
    clear_tool_inputs: bool = False
    preserve_top: int = 5
    preserve_bottom: int = 5
    sandwich_threshold: float = 0.7
    summary_max_tokens: int = 4096
    # Cap on what is sent to the summariser (None: no cap).
    summary_input_tokens: int | None = None
    model: str = ""
    prompts: PromptConfig = PromptConfig()

    def __post_init__(self) -> None:
        for name in (
            "retain_last_turns",
            "keep_tool_uses",
            "clear_at_least",
            "preserve_top",
            "preserve_bottom",
        ):
            _check_nonneg_int(getattr(self, name), name)
        if not 0 < self.sandwich_threshold <= 1:
            raise EngineValidationError(
                "sandwich_threshold must be in (0, 1]", field="sandwich_threshold"
            )
        if self.summary_max_tokens <= 0:
            raise EngineValidationError(
                "summary_max_tokens must be positive", field="summary_max_tokens"
            )

    @classmethod
    def from_policy(
        cls,
        policy: Mapping[str, Any] | None,
        *,
        model: str = "",
        instructions: str = "",
        retain_last_turns: int | None = None,
        summary_input_tokens: int | None = None,
    ) -> CompactionConfig:
        """From a session's ``policy["compaction"]`` (snake_case spec names)."""
        p = dict(policy or {})
        prompts = PromptConfig(
            summary_prompt=p.get("summary_prompt") or None,
            summary_directives=tuple(p.get("summary_directives") or ()),
            retain_prompt=p.get("retain_prompt"),
            retain_directives=tuple(p.get("retain_directives") or ()),
            compression_prompt=p.get("compression_prompt") or None,
            instructions=instructions or "",
        )
        turns = (
            retain_last_turns if retain_last_turns is not None else p.get("retain_last_turns", 1)
        )
        return cls(
            retain_last_turns=turns,
            keep_tool_uses=p.get("keep_tool_uses", 3),
            exclude_tools=frozenset(p.get("exclude_tools") or ()),
            clear_at_least=p.get("clear_at_least", 0),
            clear_tool_inputs=bool(p.get("clear_tool_inputs", False)),
            preserve_top=p.get("preserve_top", 5),
            preserve_bottom=p.get("preserve_bottom", 5),
            sandwich_threshold=p.get("sandwich_threshold", 0.7),
            summary_max_tokens=p.get("summary_max_tokens", 4096),
            summary_input_tokens=summary_input_tokens,
            # spec 000 §2.6.2: compaction.model wins over the caller's model.
            model=p.get("model") or model,
            prompts=prompts,
        )


@dataclass(frozen=True, slots=True)
class ContextState:
    """spec 004 ContextState: the cached sandwich summary and the range it covers."""

    strategy: str
    summary: str
    summary_range: tuple[int, int]
    compressed_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "summary": self.summary,
            "summary_range": list(self.summary_range),
            "compressed_at": self.compressed_at,
        }


@dataclass(slots=True)
class StrategyContext:
    """Everything a strategy may need besides the window."""

    counter: TokenCounter
    config: CompactionConfig = CompactionConfig()
    summarizer: Summarizer | None = None
    # The chain stops once the window is at or under this many tokens (unless forced).
    target_tokens: int = 0
    force: bool = False
    # "budget" (the chain's last link) or "overflow" (the provider said too long).
    reason: str = "budget"
    # spec 004 max_context_tokens for the sandwich threshold (None: the target).
    max_context_tokens: int | None = None
    sandwich_state: ContextState | None = None
    # The whole transcript (seq order) for the sandwich; None: the window's messages.
    transcript: Callable[[], list[Message]] | None = None
    llm_calls: list[SummaryResult] = field(default_factory=list)


@dataclass(slots=True)
class StrategyReport:
    name: str
    before_tokens: int
    after_tokens: int
    before_msg_count: int
    after_msg_count: int
    applied: bool
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "applied": self.applied,
            "before_tokens": self.before_tokens,
            "after_tokens": self.after_tokens,
            "before_msg_count": self.before_msg_count,
            "after_msg_count": self.after_msg_count,
            "details": self.details,
        }


@dataclass(slots=True)
class StrategyOutcome:
    window: Window
    report: StrategyReport
    # Sandwich only: the state to cache (None with ``state_changed`` means "clear it").
    sandwich_state: ContextState | None = None
    state_changed: bool = False


def _outcome(
    name: str,
    before: Window,
    after: Window | None,
    ctx: StrategyContext,
    details: dict[str, Any] | None = None,
    **extra: Any,
) -> StrategyOutcome:
    """Report a strategy's effect; a result that is not smaller is discarded."""
    details = dict(details or {})
    before_tokens = before.tokens(ctx.counter)
    before_count = before.message_count()
    applied = after is not None
    if after is not None:
        after_tokens = after.tokens(ctx.counter)
        if after_tokens > before_tokens or (
            after_tokens == before_tokens
            and after.message_count() >= before_count
            and after.summary == before.summary
            and after.retain == before.retain
        ):
            details.setdefault("skipped", "the result would not be smaller")
            details["rejected_tokens"] = after_tokens
            applied = False
    if not applied:
        after = before
        extra = {}
    assert after is not None
    report = StrategyReport(
        name=name,
        before_tokens=before_tokens,
        after_tokens=after.tokens(ctx.counter),
        before_msg_count=before_count,
        after_msg_count=after.message_count(),
        applied=applied,
        details=details,
    )
    return StrategyOutcome(window=after, report=report, **extra)


# --- cuts ------------------------------------------------------------------------------


def open_call_floor(messages: Sequence[Message]) -> int:
    """Index of the earliest call of the last turn still waiting for its result.

    Such a result will be appended after the compaction, so no cut may pass
    its call: the result would arrive with no call before it. Unanswered calls
    of earlier turns are abandoned (a user spoke since); cutting past them is
    allowed and the store closes them. ``len(messages)`` when nothing is open.
    """
    starts = parse_turn_boundaries(messages)
    last_turn = starts[-1] if starts else 0
    pending: dict[str, list[int]] = {}
    for i, msg in enumerate(messages):
        if msg.role == "assistant":
            for call in msg.tool_calls:
                pending.setdefault(call.id, []).append(i)
        elif msg.role == "tool" and msg.tool_call_id is not None:
            calls = pending.get(msg.tool_call_id)
            if calls:
                calls.pop()
    open_at = [i for calls in pending.values() for i in calls if i >= last_turn]
    return min(open_at) if open_at else len(messages)


def snap_cut(messages: Sequence[Message], target: int, *, ceiling: int | None = None) -> int:
    """A safe turn-boundary cut at or before ``target`` (spec 003 findSafeBoundary),
    never past ``ceiling``; a cut at the very end is always safe. 0: no cut."""
    n = len(messages)
    ceiling = n if ceiling is None else min(ceiling, n)
    target = min(max(target, 0), ceiling)
    if target == n:
        return n
    cut = find_safe_boundary(messages, target)
    return cut if cut <= ceiling else 0


def unanswered_calls(messages: Sequence[Message]) -> set[str]:
    """Call ids in ``messages`` with no result in ``messages``."""
    pending: dict[str, int] = {}
    for msg in messages:
        if msg.role == "assistant":
            for call in msg.tool_calls:
                pending[call.id] = pending.get(call.id, 0) + 1
        elif msg.role == "tool" and msg.tool_call_id in pending:
            pending[msg.tool_call_id] -= 1
            if not pending[msg.tool_call_id]:
                del pending[msg.tool_call_id]
    return set(pending)


# --- tool clearing ---------------------------------------------------------------------


def cleared_view(ref: str | None) -> str:
    return CLEARED_VIEW.format(ref=ref) if ref else CLEARED_VIEW_NO_REF


def _clear_output(msg: Message, counter: TokenCounter) -> Message:
    return counter.recount(replace(msg, view=cleared_view(msg.output_ref), view_state="cleared"))


def _clear_inputs(msg: Message, counter: TokenCounter) -> Message:
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
        new = _clear_output(msg, counter)
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
        return _outcome(
            "tool_clearing", window, None, ctx, {**details, "skipped": "nothing to clear"}
        )
    if freed < cfg.clear_at_least:
        return _outcome(
            "tool_clearing",
            window,
            None,
            ctx,
            {**details, "skipped": f"would free {freed} tokens, below clear_at_least"},
        )
    if cfg.clear_tool_inputs:
        done = {
            msgs[i].tool_call_id
            for i, m in enumerate(msgs)
            if m.role == "tool" and m.view_state == "cleared"
        }
        inputs = 0
        for i, msg in enumerate(msgs):
            if (
                msg.role == "assistant"
                and msg.tool_calls
                and msg.view_state != "cleared"
                and all(c.id in done for c in msg.tool_calls)
                and not any(c.name in cfg.exclude_tools for c in msg.tool_calls)
                and any(c.arguments for c in msg.tool_calls)
            ):
                new = _clear_inputs(msg, counter)
                if counter.message(new) < counter.message(msg):
                    freed += counter.message(msg) - counter.message(new)
                    msgs[i] = new
                    inputs += 1
        details["cleared_inputs"] = inputs
        details["freed_tokens"] = freed
    return _outcome(
        "tool_clearing", window, Window(msgs, window.retain, window.summary), ctx, details
    )


# --- retain + summary (spec 000) -----------------------------------------------------------


def summary_cut(messages: Sequence[Message], retain_last_turns: int) -> int:
    """Where the kept part starts: the last N turns, snapped to a safe cut."""
    start = last_turns_start(messages, retain_last_turns)
    return snap_cut(messages, start, ceiling=open_call_floor(messages))


def iteration_cut(
    messages: Sequence[Message], start: int, keep_tokens: int, counter: TokenCounter
) -> int:
    """A cut inside the kept turns so that what follows fits ``keep_tokens``.

    An agent that works through one task is one long turn (one user message,
    hundreds of tool iterations): keeping "the last turn" keeps everything, and
    a summary could never free anything. spec 003 allows breaking turn
    atomicity as the last resort; here it is broken at an iteration boundary
    (an assistant message where no call is separated from its results, never
    past a call still waiting), keeping as many recent iterations as fit.
    ``start`` when no such cut exists.
    """
    n = len(messages)
    unsafe = _unsafe_cuts(messages)
    floor = open_call_floor(messages)
    candidates = [
        i
        for i in range(start + 1, min(floor, n - 1) + 1)
        if messages[i].role == "assistant" and not unsafe[i]
    ]
    if not candidates:
        return start
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + counter.message(messages[i])
    for i in candidates:
        if suffix[i] <= keep_tokens:
            return i
    return candidates[-1]  # even the newest iteration alone is over: keep just it


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


def _call_summarizer(ctx: StrategyContext, request: Any) -> SummaryResult:
    if ctx.summarizer is None:
        raise SummarizerError("No summariser is configured", transient=False)
    result = ctx.summarizer.complete(request)
    ctx.llm_calls.append(result)
    return result


def summarize(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """spec 000 §2.6-2.7: retain + summary + the last ``retain_last_turns`` turns.

    The earlier retain and summary are part of what is summarised, so a second
    compaction folds the first one in rather than losing it.
    """
    cfg = ctx.config
    msgs = window.messages
    cut = summary_cut(msgs, cfg.retain_last_turns)
    split_turn = False
    if ctx.target_tokens > 0 and cfg.retain_last_turns > 0:
        # The kept turns get at most half the target; the rest is for the
        # summary and what arrives next.
        keep = ctx.target_tokens // 2
        if ctx.counter.messages(msgs[cut:]) > keep:
            inner = iteration_cut(msgs, cut, keep, ctx.counter)
            split_turn = inner > cut
            cut = inner
    span = list(msgs[:cut])
    details: dict[str, Any] = {"summarised_messages": len(span), "kept_messages": len(msgs) - cut}
    if split_turn:
        details["split_turn"] = True
    if not span:
        return _outcome(
            "summarize", window, None, ctx, {**details, "skipped": "nothing before the kept turns"}
        )
    source, fit = fit_summary_input(
        [*window.preamble(), *span], cfg.summary_input_tokens, ctx.counter
    )
    details.update({k: v for k, v in fit.items() if v})
    if not strip_trailing_tool_calls(source):
        # Only a tool-calling assistant message with nothing to say: spec 000
        # §2.6.1 drops it, which leaves nothing to summarise.
        return _outcome(
            "summarize", window, None, ctx, {**details, "skipped": "nothing to summarise"}
        )
    request = make_retain_summary_request(
        source, cfg.prompts, model=cfg.model, max_tokens=cfg.summary_max_tokens
    )
    result = _call_summarizer(ctx, request)
    retain, summary = extract_retain_summary(result.text)
    if not summary:
        raise SummarizerError("The summariser answered without a summary", transient=False)
    details["model"] = result.model
    return _outcome("summarize", window, Window(list(msgs[cut:]), retain, summary), ctx, details)


# --- sandwich (spec 004) ----------------------------------------------------------------------


def _check_limit(max_context_tokens: int) -> None:
    if (
        isinstance(max_context_tokens, bool)
        or not isinstance(max_context_tokens, int)
        or max_context_tokens <= 0
    ):
        # spec 004 validation rules / CX-NT1.
        raise EngineValidationError(
            "Context limit must be positive",
            field="max_context_tokens",
            details={"max_context_tokens": max_context_tokens},
        )


@dataclass(slots=True)
class ContextResult:
    """spec 004 ContextResult, plus where the kept top ends and the bottom starts."""

    messages: list[Message]
    summary_used: bool
    tokens_used: int
    new_state: ContextState | None
    summary: str = ""
    top_end: int = 0
    bottom_start: int = 0


class SandwichStrategy:
    """spec 004's default strategy: keep the beginning and the end, compress the middle.

    Message counts are snapped to safe cuts: the top grows and the bottom
    grows until no call is separated from its result (so "top 5 / bottom 5
    always preserved" holds with at least 5 each). ``incremental``: when the
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
    ) -> None:
        self.counter = counter
        self.preserve_top = _check_nonneg_int(preserve_top, "preserve_top")
        self.preserve_bottom = _check_nonneg_int(preserve_bottom, "preserve_bottom")
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
        self.llm_calls: list[SummaryResult] = []

    def estimate(self, messages: Sequence[Message]) -> int:
        return self.counter.messages(messages)

    def needs_compression(self, messages: Sequence[Message], max_context_tokens: int) -> bool:
        _check_limit(max_context_tokens)
        threshold = math.floor(max_context_tokens * self.compression_threshold)
        return (
            self.estimate(messages) > threshold
            and len(messages) > self.preserve_top + self.preserve_bottom
        )

    def ranges(self, messages: Sequence[Message]) -> tuple[int, int]:
        """(top_end, bottom_start): the middle is ``messages[top_end:bottom_start]``."""
        n = len(messages)
        unsafe = _unsafe_cuts(messages)
        top_end = min(self.preserve_top, n)
        while top_end < n and unsafe[top_end]:
            top_end += 1
        bottom_start = min(max(n - self.preserve_bottom, 0), open_call_floor(messages))
        while bottom_start > 0 and unsafe[bottom_start]:
            bottom_start -= 1
        return top_end, bottom_start

    def is_valid(self, state: ContextState | None, messages: Sequence[Message]) -> bool:
        """spec 004 cache validity: the range starts after the top and ends before the bottom."""
        if state is None or state.strategy != self.name:
            return False
        return tuple(state.summary_range) == self.ranges(messages)

    def compress(self, messages: Sequence[Message], summarizer: Summarizer | None) -> str:
        """spec 004 "Compress Middle" (CX-NT2: empty input is a validation error)."""
        source, _ = fit_summary_input(messages, self.summary_input_tokens, self.counter)
        request = make_compress_request(
            source, self.prompts, model=self.model, max_tokens=self.max_tokens
        )
        if summarizer is None:
            raise SummarizerError("No summariser is configured", transient=False)
        result = summarizer.complete(request)
        self.llm_calls.append(result)
        text = result.text.strip()
        if not text:
            raise SummarizerError("The summariser returned an empty summary", transient=False)
        return text

    def summary_message(self, summary: str) -> Message:
        # spec 004 puts it in a system message; a history never carries one
        # (spec 003), so it travels as the summary slot: a user message.
        return Message(role="user", content=SANDWICH_SUMMARY_FORMAT.format(summary=summary))

    def build_context(
        self,
        messages: Sequence[Message],
        cached_summary: ContextState | None,
        max_context_tokens: int,
        *,
        summarizer: Summarizer | None = None,
        force: bool = False,
    ) -> ContextResult:
        _check_limit(max_context_tokens)
        if not messages:
            raise EngineValidationError("Conversation has no messages", field="messages")
        full = ContextResult(
            messages=list(messages),
            summary_used=False,
            tokens_used=self.estimate(messages),
            new_state=None,
            top_end=len(messages),
            bottom_start=len(messages),
        )
        if len(messages) <= self.preserve_top + self.preserve_bottom:
            return full
        if not force and not self.needs_compression(messages, max_context_tokens):
            return full
        top_end, bottom_start = self.ranges(messages)
        if bottom_start <= top_end:
            return full
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


def render_top(messages: Sequence[Message]) -> str:
    return f"{TOP_HEADER}\n{format_messages(messages)}" if messages else ""


def sandwich(window: Window, ctx: StrategyContext) -> StrategyOutcome:
    """spec 004 sandwich on the whole conversation, written back as a window:
    the top (verbatim) as retain, the middle's summary as summary, the bottom live."""
    cfg = ctx.config
    if ctx.transcript is not None:
        by_seq = {m.seq: m for m in window.messages if m.seq is not None}
        conversation = [by_seq.get(m.seq, m) for m in ctx.transcript()]
    else:
        conversation = list(window.messages)
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
    )
    if not conversation:
        return _outcome("sandwich", window, None, ctx, {"skipped": "no messages"})
    limit = ctx.max_context_tokens or max(1, ctx.target_tokens)
    result = strategy.build_context(
        conversation, ctx.sandwich_state, limit, summarizer=ctx.summarizer, force=ctx.force
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
        return _outcome(
            "sandwich",
            window,
            None,
            ctx,
            {**details, "skipped": "under the threshold or too short"},
        )
    new = Window(
        messages=list(conversation[result.bottom_start :]),
        retain=render_top(conversation[: result.top_end]),
        summary=result.summary,
    )
    state = result.new_state or ctx.sandwich_state
    return _outcome(
        "sandwich",
        window,
        new,
        ctx,
        details,
        sandwich_state=state,
        state_changed=result.new_state is not None,
    )


# --- drop oldest turns (spec 003 emergency) ------------------------------------------------------


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
    unsafe = _unsafe_cuts(msgs)
    users = [i for i, m in enumerate(msgs) if m.role == "user" and i <= floor and not unsafe[i]]
    cut = users[-1] if users else 0
    kept = list(msgs[cut:])
    for i, msg in enumerate(kept):
        if msg.role == "tool" and msg.view_state != "cleared":
            new = _clear_output(msg, counter)
        elif msg.role == "assistant":
            new = msg
            if any(c.arguments for c in msg.tool_calls):
                new = _clear_inputs(new, counter)
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
        return _outcome("drop_oldest_turns", window, None, ctx, {"skipped": "no messages"})
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
    return _outcome("drop_oldest_turns", window, Window(kept, window.retain, summary), ctx, details)


# --- the chain -----------------------------------------------------------------------------------

STRATEGIES: dict[str, Callable[[Window, StrategyContext], StrategyOutcome]] = {
    "tool_clearing": tool_clearing,
    "summarize": summarize,
    "sandwich": sandwich,
    "drop_oldest_turns": drop_oldest_turns,
}


def validate_chain(names: Sequence[str]) -> tuple[str, ...]:
    if not names:
        raise EngineValidationError("A strategy chain needs at least one strategy", field="chain")
    for name in names:
        if name not in STRATEGIES:
            raise EngineValidationError(
                f"Unknown strategy {name!r}; use one of {', '.join(STRATEGY_NAMES)}", field="chain"
            )
    return tuple(names)


@dataclass(slots=True)
class CompactResult:
    """spec 002 §7 CompactResult (plus the per-strategy reports)."""

    before_tokens: int
    after_tokens: int
    before_msg_count: int
    after_msg_count: int
    strategies_run: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "before_tokens": self.before_tokens,
            "after_tokens": self.after_tokens,
            "before_msg_count": self.before_msg_count,
            "after_msg_count": self.after_msg_count,
            "strategies_run": list(self.strategies_run),
        }


@dataclass(slots=True)
class ChainResult:
    window: Window
    result: CompactResult
    reports: list[StrategyReport]
    sandwich_state: ContextState | None = None
    # True when the cached sandwich state must be replaced (or cleared, with None).
    state_changed: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.result.strategies_run)


def run_chain(window: Window, names: Sequence[str], ctx: StrategyContext) -> ChainResult:
    """Run strategies in order until the window is at or under ``ctx.target_tokens``.

    Forced (a manual or tool request, like ``/compact``): every strategy runs
    fully whatever the usage — except that in a chain of several, the
    emergency link (dropping turns) only runs when the window is still over
    the target: it destroys turns instead of condensing them.
    """
    names = validate_chain(names)
    counter = ctx.counter
    before_tokens = window.tokens(counter)
    before_count = window.message_count()
    reports: list[StrategyReport] = []
    state: ContextState | None = ctx.sandwich_state
    state_changed = False
    for name in names:
        tokens = window.tokens(counter)
        if tokens <= ctx.target_tokens and (
            not ctx.force or (name == EMERGENCY_STRATEGY and len(names) > 1)
        ):
            reports.append(
                StrategyReport(
                    name,
                    tokens,
                    tokens,
                    window.message_count(),
                    window.message_count(),
                    applied=False,
                    details={"skipped": "under the target"},
                )
            )
            if not ctx.force:
                break
            continue
        outcome = STRATEGIES[name](window, ctx)
        reports.append(outcome.report)
        if outcome.report.applied:
            window = outcome.window
            if name == "sandwich":
                if outcome.state_changed:
                    state, state_changed = outcome.sandwich_state, True
            elif state is not None:
                # spec 004: the cached state is cleared when the strategy changes
                # (the summary slot now holds another strategy's text).
                state, state_changed = None, True
    result = CompactResult(
        before_tokens=before_tokens,
        after_tokens=window.tokens(counter),
        before_msg_count=before_count,
        after_msg_count=window.message_count(),
        strategies_run=[r.name for r in reports if r.applied],
    )
    return ChainResult(
        window=window,
        result=result,
        reports=reports,
        sandwich_state=state,
        state_changed=state_changed,
    )


def usage_note(used: int, effective_window: int, ratio: float = USAGE_NOTE_RATIO) -> str | None:
    """spec 002 §7 context awareness: the note once usage exceeds 80 %."""
    if effective_window <= 0 or used / effective_window <= ratio:
        return None
    return USAGE_NOTE.format(pct=math.floor(used * 100 / effective_window))
