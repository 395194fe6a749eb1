"""Cache accounting of a build (docs/concepts/caching.md#breakpoints): what a provider could read
from cache compared with the previous build, its cost, and saving it with the build."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import F
from django.utils import timezone

from contextsvc.engine import caching
from contextsvc.engine.build import ContextParts, layout, preamble_messages
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.lru import BoundedLRU
from sessions import accounting
from sessions.models import Session

from ..models import PromptState
from .blocks import cache_block, deferral_block
from .chain import BUILT_KEPT, ChainWrite, build_chain, chain_tag, stored, written
from .sections import PromptPlan, count_text, sent_tool_tokens
from .selection import ToolPlan
from .state import DEGRADED_LOG_SIZE, degraded_entry, state_read
from .tools import tool_digest

log = logging.getLogger("contextsvc.prompting")


def cache_mode(fmt: str, session: Session, plan: PromptPlan) -> str:
    if fmt in ("openai", "responses", "gemini"):
        return "automatic"
    if fmt == "raw":
        provider = session.provider or accounting.infer_provider(session.model)
        if provider == "openai":
            return "automatic"
        if provider != "anthropic":
            return "none"
    return "breakpoints" if plan.cache is not None and not plan.plain else "none"


def _message_key(msg: EngineMessage) -> bytes:
    # A message's content never changes once stored (append-only), so its seq
    # names it; what can change is its view (a trim, a cut, tool clearing),
    # which shows in the view state, the view's length and the recount.
    # Hashing every body on every build would cost more than the whole build.
    # Each message is keyed once per window (``_history_blocks``).
    view = -1 if msg.view is None else len(msg.view)
    return (
        f"m\x1f{msg.seq}\x1f{msg.role}\x1f{msg.view_state}\x1f{view}\x1f{msg.token_count}"
    ).encode()


# The last build's history block keys and tokens per session (this process).
# Builds read the window from the window cache (``sessions.selectors``): the
# same message objects, build after build, with the appended ones after them;
# only messages past the prefix of identical objects are keyed again. Bounded
# by the messages held, as the window cache is.
_HISTORY: BoundedLRU[int, tuple[list[EngineMessage], list[bytes], list[int]]] = BoundedLRU(
    BUILT_KEPT, max_weight=100_000, weigh=lambda memo: len(memo[0])
)


def _history_blocks(
    session_pk: int, messages: Sequence[EngineMessage]
) -> tuple[list[bytes], list[int]]:
    """(block key, tokens) of each history message, as ``_message_key`` gives them."""
    memo = _HISTORY.get(session_pk)
    shared = 0
    if memo is not None:
        before = memo[0]
        # The same objects, or equal ones (a list comparison in C, identity first):
        # a message is never changed in place (a trim reloads the window as new
        # objects), and its key is made of compared fields only, so it stands.
        if len(before) <= len(messages) and messages[: len(before)] == before:
            shared = len(before)
    keys = memo[1][:shared] if memo is not None else []
    tokens = memo[2][:shared] if memo is not None else []
    for msg in messages[shared:]:
        keys.append(_message_key(msg))
        tokens.append(msg.token_count or 0)
    _HISTORY.put(session_pk, (list(messages), keys, tokens))
    return keys, tokens


def account(
    session: Session,
    fmt: str,
    parts: ContextParts,
    tool_plan: ToolPlan,
    prompt_plan: PromptPlan,
    state: PromptState,
    now: datetime,
) -> tuple[dict[str, Any], ChainWrite]:
    """Cache accounting of one build; updates ``state`` in memory (saved by the caller, with
    the chain as the ``ChainWrite`` says)."""
    tokenizer = accounting.tokenizer_of(session)
    plan = None if prompt_plan.plain else prompt_plan.cache
    keys: list[bytes] = []
    tokens: list[int] = []
    marks: list[int] = []
    if parts.tools:
        digests = [tool_plan.digests.get(t.name) or tool_digest(t) for t in parts.tools]
        keys.append(caching.block_key("tools", *digests))
        tokens.append(sent_tool_tokens(parts.tools, tool_plan, tokenizer))
        if plan is not None and plan.tools:
            marks.append(0)
    lay = layout(parts)
    offset = len(keys)
    for i, section in enumerate(lay.system):
        keys.append(caching.block_key("system", section.content))
        if not prompt_plan.plain and i < len(prompt_plan.system_tokens):
            tokens.append(prompt_plan.system_tokens[i])
        else:
            tokens.append(count_text(section.content, tokenizer))
        if plan is not None and i in plan.system:
            marks.append(offset + i)
    history_keys, history_tokens = _history_blocks(session.pk, parts.messages)
    # The order sent: the sandwich's head (if any), the preamble, the rest.
    head = min(parts.head_count, len(history_keys))
    if head:
        keys.extend(history_keys[:head])
        tokens.extend(history_tokens[:head])
    for msg in preamble_messages(parts):
        keys.append(caching.block_key("preamble", msg.text))
        tokens.append(count_text(msg.text, tokenizer) + 4)
    keys.extend(history_keys[head:] if head else history_keys)
    tokens.extend(history_tokens[head:] if head else history_tokens)
    if plan is not None and plan.history and len(keys) > offset + len(lay.system):
        marks.append(len(keys) - 1)
    tail_tokens = sum(count_text(t, tokenizer) for t in lay.tail)
    tail_tokens += count_text(parts.final_instruction, tokenizer)

    mode = cache_mode(fmt, session, prompt_plan)
    ttl = prompt_plan.policy.ttl
    current = build_chain(session.pk, keys)
    previous = stored(state)
    elapsed = (now - state.last_built_at).total_seconds() if state.last_built_at else None
    estimate = caching.estimate_cache(
        block_tokens=tokens,
        current=current,
        previous=previous,
        previous_cached=(state.last_cached or []) if state.last_mode == mode else [],
        breakpoints=marks,
        tail_tokens=tail_tokens,
        mode=mode,
        min_cacheable=prompt_plan.min_cacheable,
        elapsed_seconds=elapsed,
        ttl=ttl,
    )
    prices = caching.Prices.from_table(prompt_plan.profile.prices if prompt_plan.profile else None)
    costs = caching.estimate_costs(prices, estimate, ttl=ttl)
    record: dict[str, Any] = {
        "at": now.isoformat(),
        "format": fmt,
        "through_seq": parts.messages[-1].seq if parts.messages else None,
        **estimate.to_dict(),
        "breakpoints": plan.to_dict() if plan is not None else None,
        "breakpoint_blocks": marks,
        **costs,
    }
    totals = dict(state.cache_totals or {})
    for key, value in (
        ("builds", 1),
        ("input_tokens", estimate.input_tokens),
        ("prefix_identical_tokens", estimate.prefix_identical_tokens),
        ("cache_read_tokens", estimate.cache_read_tokens),
        ("cache_write_tokens", estimate.cache_write_tokens),
        ("uncached_input_tokens", estimate.uncached_tokens),
        ("prefix_changes", int(estimate.prefix_changed)),
    ):
        totals[key] = int(totals.get(key, 0)) + value
    if costs.get("priced"):
        for key in ("input_cost_usd", "input_cost_without_cache_usd"):
            totals[key] = round(float(totals.get(key, 0.0)) + costs[key], 6)
    kept = estimate.prefix_identical_blocks * caching.DIGEST_BYTES if previous else 0
    chain_write = ChainWrite(current=current, held=state.chain_tag, kept=kept)
    state.last_chain, state.chain_tag = current, chain_tag(current)
    state.last_cached = caching.cached_after(estimate, marks)
    state.last_mode = mode
    state.last_built_at = now
    state.last_build = record
    state.cache_totals = totals
    return record, chain_write


@dataclass(slots=True)
class AccountedBuild:
    """A build's accounting, computed in memory; ``build_record_save`` saves it."""

    session: Session
    tool_plan: ToolPlan
    prompt_plan: PromptPlan
    state: PromptState | None
    record: dict[str, Any] | None
    deferral: dict[str, Any]
    failures: list[dict[str, str]] = field(default_factory=list)
    chain: ChainWrite | None = None  # with ``record``: the chain to store

    def blocks(self) -> dict[str, Any]:
        """The budget's ``cache``, ``deferral`` and ``degraded`` for this build."""
        return {
            "cache": cache_block(
                self.session,
                self.state,
                self.record,
                policy=self.prompt_plan.policy,
                profile=self.prompt_plan.profile,
                with_reported=False,
            ),
            "deferral": self.deferral,
            "degraded": self.failures,
        }


def account_build(
    session: Session,
    fmt: str,
    parts: ContextParts,
    tool_plan: ToolPlan,
    prompt_plan: PromptPlan,
) -> AccountedBuild:
    """Account the build against the previous one, in memory. Never raises:
    a failure is listed in ``degraded`` (docs/concepts/caching.md#degradation)."""
    failures = [*tool_plan.degraded, *prompt_plan.degraded]
    state = tool_plan.state
    build_record: dict[str, Any] | None = None
    chain_write: ChainWrite | None = None
    try:
        if state is None:
            state = state_read(session)
        build_record, chain_write = account(
            session, fmt, parts, tool_plan, prompt_plan, state, timezone.now()
        )
    except Exception as exc:
        log.exception("cache accounting failed for session %s", session.external_id)
        failures.append(degraded_entry("accounting", exc))
    return AccountedBuild(
        session=session,
        tool_plan=tool_plan,
        prompt_plan=prompt_plan,
        state=state,
        record=build_record,
        deferral=deferral_block(state, tool_plan),
        failures=failures,
        chain=chain_write,
    )


# The deferral block's running figures: kept in their own columns, not in last_deferral.
_RUNNING_DEFERRAL_KEYS = (
    "searched",
    "loaded_total",
    "recent_searches",
    "search_count",
    "tokens_saved_total",
)


def build_record_save(built: AccountedBuild) -> None:
    """Save the build into the session's state: what planning learned, the
    accounting, the degradations. Never raises (a failure is listed)."""
    state, tool_plan = built.state, built.tool_plan
    if state is None:
        return
    try:
        saved = tool_plan.selection.tokens_saved if tool_plan.selection is not None else 0
        # Only what changed: within a turn the LRU and the selection rarely do.
        update: dict[str, Any] = {f: getattr(state, f) for f in tool_plan.dirty}
        last_deferral = {k: v for k, v in built.deferral.items() if k not in _RUNNING_DEFERRAL_KEYS}
        if last_deferral != (state.last_deferral or {}):
            update["last_deferral"] = state.last_deferral = last_deferral
        if built.failures or state.degraded:
            update["degraded"] = built.failures
        if built.failures:
            update["degraded_log"] = [*(state.degraded_log or []), *built.failures][
                -DEGRADED_LOG_SIZE:
            ]
        if built.record is not None and built.chain is not None:
            update.update(
                **built.chain.fields(),
                last_cached=state.last_cached,
                last_mode=state.last_mode,
                last_built_at=state.last_built_at,
                last_build=built.record,
                cache_totals=state.cache_totals,
            )
        if saved:
            # F(): tool_search does not write this column, but builds may race.
            update["tokens_saved_total"] = F("tokens_saved_total") + saved
        if update:
            PromptState.objects.filter(pk=state.pk).update(**update)
        if "chain_tag" in update and built.chain is not None:
            written(state.session_id, built.chain.current)
        state.tokens_saved_total += saved
        built.deferral["tokens_saved_total"] = state.tokens_saved_total
    except Exception as exc:
        log.exception("could not save the prompt state of session %s", built.session.external_id)
        built.failures.append(degraded_entry("state", exc))
