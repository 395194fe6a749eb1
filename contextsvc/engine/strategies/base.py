"""The window a compaction works on, its token counter, config, reports and outcomes.

Every strategy takes a ``Window`` and a ``StrategyContext`` and returns a
``StrategyOutcome``; ``make_outcome`` discards a result that is not smaller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contextsvc.engine.build import ContextParts
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message
from contextsvc.engine.summarize import PromptConfig, Summarizer, SummaryResult
from contextsvc.engine.summary_placement import preamble
from contextsvc.engine.tokens import (
    DEFAULT_ESTIMATE_CONFIG,
    EstimateConfig,
    Tokenizer,
    estimate_message,
    estimate_text,
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
    """The live context a compaction works on: the head (docs/concepts/compaction.md#sandwich-head:
    the conversation's first messages, kept as messages before the summary), retain
    and summary (sent as user messages, or the summary in the system role) and
    the live messages, oldest first.

    Only the sandwich sets ``head``; every other strategy works on ``messages``
    and carries the head over unchanged (``with_messages``).
    """

    messages: list[Message]
    retain: str = ""
    summary: str = ""
    head: list[Message] = field(default_factory=list)
    # The summary is sent with the search tool's hint (``engine.recall``).
    search_hint: bool = True

    def preamble(self) -> list[Message]:
        return preamble(self.retain, self.summary, self.search_hint)

    def tokens(self, counter: TokenCounter) -> int:
        return (
            counter.messages(self.head)
            + counter.messages(self.preamble())
            + counter.messages(self.messages)
        )

    def preamble_tokens(self, counter: TokenCounter) -> int:
        return counter.messages(self.preamble())

    def message_count(self) -> int:
        return len(self.head) + len(self.preamble()) + len(self.messages)

    def with_messages(
        self, messages: list[Message], retain: str | None = None, summary: str | None = None
    ) -> Window:
        """This window with other live messages (and retain / summary), the head kept."""
        return Window(
            messages=messages,
            retain=self.retain if retain is None else retain,
            summary=self.summary if summary is None else summary,
            head=list(self.head),
            search_hint=self.search_hint,
        )


# --- configuration -------------------------------------------------------------------

CLEAR_MODES: tuple[str, ...] = ("keep_recent", "oldest_half")


def check_nonneg_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EngineValidationError(
            f"{name} must be a non-negative integer, got {value!r}", field=name
        )
    return value


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """The settings of docs/concepts/compaction.md#retain-summary,
    docs/concepts/compaction.md#sandwich and docs/concepts/compaction.md#tool-clearing."""

    retain_last_turns: int = 1
    keep_tool_uses: int = 3
    exclude_tools: frozenset[str] = frozenset()
    clear_at_least: int = 0
    clear_tool_inputs: bool = False
    # docs/concepts/compaction.md#tool-clearing / clear_tool_uses: results under this many bytes are
    # not worth clearing (the note and the broken cache prefix cost more).
    clear_min_bytes: int = 1024
    # "keep_recent" (keep the ``keep_tool_uses`` newest) or "oldest_half".
    clear_mode: str = "keep_recent"
    # Keep more results in error-heavy or tool-dense stretches; errors longer.
    adaptive_keep: bool = False
    error_keep_factor: int = 2
    dense_tool_uses: int = 8
    preserve_top: int = 5
    preserve_bottom: int = 5
    sandwich_threshold: float = 0.7
    # docs/concepts/compaction.md#sandwich: the middle must hold at least this many messages to be
    # compressed.
    sandwich_min_middle: int = 1
    # the compression prompt (docs/concepts/compaction.md#compression-prompt) asks to preserve four
    # kinds of content: ask for them as sections.
    sandwich_sections: bool = True
    summary_max_tokens: int = 4096
    # Cap on what is sent to the summariser (None: no cap).
    summary_input_tokens: int | None = None
    # The first user message (the task) stays verbatim above the summary.
    pin_task: bool = True
    # A later compaction summarises only what left the window since the last
    # one and merges (``engine.summary_merge``); False: re-summarise it all.
    incremental_summary: bool = True
    # sliding_window: the newest messages kept (docs/concepts/compaction.md#sliding-window).
    keep_last_n: int = 20
    # tree (docs/concepts/compaction.md#tree): messages per leaf summary, and how many
    # levels of summaries of summaries stand above the leaves (1: leaves only).
    chunk_size: int = 20
    levels: int = 3
    model: str = ""
    prompts: PromptConfig = PromptConfig()

    def __post_init__(self) -> None:
        for name in (
            "retain_last_turns",
            "keep_tool_uses",
            "clear_at_least",
            "clear_min_bytes",
            "preserve_top",
            "preserve_bottom",
            "sandwich_min_middle",
            "keep_last_n",
        ):
            check_nonneg_int(getattr(self, name), name)
        if self.clear_mode not in CLEAR_MODES:
            raise EngineValidationError(
                f"clear_mode must be one of {', '.join(CLEAR_MODES)}", field="clear_mode"
            )
        for name in ("error_keep_factor", "dense_tool_uses", "chunk_size", "levels"):
            if check_nonneg_int(getattr(self, name), name) < 1:
                raise EngineValidationError(f"{name} must be at least 1", field=name)
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
            clear_min_bytes=p.get("clear_min_bytes", 1024),
            clear_mode=p.get("clear_mode") or "keep_recent",
            adaptive_keep=bool(p.get("adaptive_keep", False)),
            error_keep_factor=p.get("error_keep_factor", 2),
            dense_tool_uses=p.get("dense_tool_uses", 8),
            preserve_top=p.get("preserve_top", 5),
            preserve_bottom=p.get("preserve_bottom", 5),
            sandwich_threshold=p.get("sandwich_threshold", 0.7),
            sandwich_min_middle=p.get("sandwich_min_middle", 1),
            sandwich_sections=bool(p.get("sandwich_sections", True)),
            summary_max_tokens=p.get("summary_max_tokens", 4096),
            summary_input_tokens=summary_input_tokens,
            pin_task=bool(p.get("pin_task", True)),
            incremental_summary=bool(p.get("incremental_summary", True)),
            keep_last_n=p.get("keep_last_n", 20),
            chunk_size=p.get("chunk_size", 20),
            levels=p.get("levels", 3),
            # docs/concepts/compaction.md#summary-model: compaction.model wins over the caller's
            # model.
            model=p.get("model") or model,
            prompts=prompts,
        )


@dataclass(frozen=True, slots=True)
class ContextState:
    """docs/concepts/compaction.md#sandwich-cache: the cached sandwich summary and the range it
    covers."""

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
    # The history room: the window tokens that must fit whatever the target
    # (None: the target is the only bound). Over it, the kept outputs' views are
    # cut before the emergency link drops turns; under it, that link never runs
    # in a chain (``run_chain``).
    room_tokens: int | None = None
    force: bool = False
    # "budget" (the chain's last link) or "overflow" (the provider said too long).
    reason: str = "budget"
    # docs/concepts/compaction.md#sandwich-threshold max_context_tokens for the sandwich threshold
    # (None: the target).
    max_context_tokens: int | None = None
    # The hard limit for the window (what the provider accepts, by our count):
    # cutting inside the newest turn only aims here, never at the lower target.
    # None: ``max_context_tokens``.
    limit_tokens: int | None = None
    # A forced run of the sandwich alone: a conversation too short to compress
    # is an error (CompressionNotNeededError), not a silent no-op.
    strict: bool = False
    sandwich_state: ContextState | None = None
    # The whole transcript (seq order) for the sandwich; None: the window's messages.
    transcript: Callable[[], list[Message]] | None = None
    llm_calls: list[SummaryResult] = field(default_factory=list)
    # The session's context as its calls send it: a summary call re-reads it
    # from the provider's cache (None: the summariser gets the messages alone).
    context_parts: ContextParts | None = None


@dataclass(slots=True)
class StrategyReport:
    """What one strategy did: tokens and messages before and after, and why it skipped."""

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
    """A strategy's result: the window to continue with and its report."""

    window: Window
    report: StrategyReport
    # Sandwich only: the state to cache (None with ``state_changed`` means "clear it").
    sandwich_state: ContextState | None = None
    state_changed: bool = False


def make_outcome(
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
