"""Prompt sections and cache breakpoints of a build (docs/concepts/caching.md#breakpoints), and the
token counts of texts that are not stored on rows."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from contextsvc.engine import caching, prompt
from contextsvc.engine.build import ContextParts, preamble_messages
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import PromptSection, ToolDef
from contextsvc.engine.tokens import Tokenizer, estimate_text, estimate_tool_def
from contextsvc.lru import BoundedLRU
from sessions import accounting
from sessions.models import Session

from .policy import CachePolicy, CacheProfile, cache_policy, cache_profile
from .selection import ToolPlan
from .state import degraded_entry

_TOKEN_COUNT = attrgetter("token_count")

log = logging.getLogger("contextsvc.prompting")

# (tokenizer, content digest) → tokens.
_COUNTS: BoundedLRU[tuple[str, bytes], int] = BoundedLRU(4096)


def count_text(text: str | None, tokenizer: Tokenizer) -> int:
    """``estimate_text`` memoised per process by content digest.

    Sections, the summary and the tail are re-sent on every build but change
    rarely; tokenizing them each time would cost milliseconds per request.
    """
    if not text:
        return 0
    if len(text) < 256:
        return estimate_text(text, tokenizer)
    key = (tokenizer.name, caching.block_key(text))
    cached = _COUNTS.get(key)
    if cached is not None:
        return cached
    value = estimate_text(text, tokenizer)
    _COUNTS.put(key, value)
    return value


@dataclass(slots=True)
class PromptPlan:
    sections: list[PromptSection]
    cache: prompt.CachePlan | None = None
    plain: bool = False
    system_tokens: list[int] = field(default_factory=list)
    tool_tokens: int = 0
    policy: CachePolicy = CachePolicy()
    profile: CacheProfile | None = None
    degraded: list[dict[str, str]] = field(default_factory=list)

    @property
    def min_cacheable(self) -> int:
        if self.policy.min_cacheable_tokens:
            return self.policy.min_cacheable_tokens
        if self.profile is not None:
            return self.profile.min_cacheable
        return prompt.DEFAULT_MIN_CACHEABLE_TOKENS


def sent_tool_tokens(tools: Sequence[ToolDef], plan: ToolPlan, tokenizer: Tokenizer) -> int:
    """Unscaled tokens of the tools actually sent (what a provider's prefix holds)."""
    total = 0
    for tool in tools:
        known = plan.tokens.get(tool.name)
        total += known if known is not None else estimate_tool_def(tool, tokenizer)
    return total


def _preamble_tokens(session: Session, tokenizer: Tokenizer) -> int:
    parts = ContextParts(
        model="", max_output_tokens=0, retain=session.retain, summary=session.summary
    )
    return sum(count_text(m.text, tokenizer) + 4 for m in preamble_messages(parts))


def plan_prompt(
    session: Session,
    *,
    tools: Sequence[ToolDef],
    tool_plan: ToolPlan,
    messages: Sequence[EngineMessage],
    message_tokens: int | None = None,
) -> PromptPlan:
    """docs/concepts/caching.md#section-order: order the sections and place the breakpoints. Never
    raises. ``message_tokens``: the messages' token counts summed, when the caller has
    the sum (the context window's figures keep it)."""
    try:
        policy = cache_policy(session)
        ordered = prompt.order_sections(
            [PromptSection(**s) for s in session.sections or ()],
            cacheable_first=policy.cacheable_first,
        )
        system, tail = prompt.split_sections(ordered)
        tokenizer = accounting.tokenizer_of(session)
        result = PromptPlan(sections=ordered, policy=policy)
        result.system_tokens = [count_text(s.content, tokenizer) for s in system]
        result.tool_tokens = sent_tool_tokens(tools, tool_plan, tokenizer)
        result.profile = cache_profile(session)
        if policy.enabled:
            if message_tokens is None:  # ``sum(m.token_count or 0 ...)``, in C
                message_tokens = sum(filter(None, map(_TOKEN_COUNT, messages)))
            history = _preamble_tokens(session, tokenizer) + message_tokens
            result.cache = prompt.plan_breakpoints(
                system,
                prompt.PlanInput(
                    tool_tokens=result.tool_tokens,
                    system_tokens=result.system_tokens,
                    history_tokens=history,
                    has_history=bool(messages) or bool(session.retain or session.summary),
                    has_tail=bool(tail) or bool(tool_plan.note),
                    min_cacheable=result.min_cacheable,
                    max_breakpoints=policy.max_breakpoints,
                    history_breakpoint=policy.history_breakpoint,
                    mark_tools=policy.mark_tools,
                    ttl=policy.ttl,
                ),
            )
        return result
    except Exception as exc:
        return plain_plan(session, exc)


def plain_plan(session: Session, exc: BaseException) -> PromptPlan:
    """docs/concepts/caching.md#degradation: when building fails, the plain concatenation."""
    log.error(
        "prompt assembly failed for session %s; plain concatenation",
        session.external_id,
        exc_info=exc,
    )
    sections: list[PromptSection] = []
    for raw in session.sections or ():
        try:
            sections.append(
                PromptSection(name=str(raw.get("name", "")), content=str(raw.get("content", "")))
            )
        except Exception:  # a row we cannot even read is left out, not fatal
            continue
    return PromptPlan(sections=sections, plain=True, degraded=[degraded_entry("sections", exc)])
