"""Prompt sections, tool deferral and cache accounting around each context build (issue 6).

``sessions.selectors.session_context`` calls, in order:

1. ``select_tools``  — spec 002 §5: which tools are sent, learning the LRU from
   the messages posted since the previous build (never the whole history);
2. ``plan_prompt``   — spec 002 §4: section order and cache breakpoints;
3. ``finish_build``  — cache accounting of what was built, and the state save.

Each step degrades instead of failing (spec 002 §8): deferral fails → all
tools; section assembly fails → plain concatenation, no markers; accounting
fails → no figures. The failure is logged and listed in the budget's
``degraded``; the context is always built.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from contextsvc.engine import caching, deferral, prompt
from contextsvc.engine.build import ContextParts, layout, preamble_messages
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import PromptSection, ToolDef
from contextsvc.engine.tokens import (
    Tokenizer,
    compact_json,
    estimate_text,
    estimate_tool_def,
    get_tokenizer,
)
from sessions import accounting
from sessions.models import Message, ModelProfile, Session, UsageReport

from .models import PromptState

log = logging.getLogger("contextsvc.prompting")

# How many failures and searches a session keeps for the budget to show.
DEGRADED_LOG_SIZE = 20
RECENT_SEARCHES = 20
LOADED_KEEP = 200


# --- policy ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """``policy.prompt_cache`` with its defaults (sessions.schemas.PromptCachePolicy)."""

    enabled: bool = True
    ttl: str = "5m"
    history_breakpoint: bool = True
    mark_tools: bool = True
    max_breakpoints: int = prompt.MAX_BREAKPOINTS
    min_cacheable_tokens: int | None = None


_CACHE_POLICY_FIELDS = {f.name for f in fields(CachePolicy)}


def cache_policy(session: Session) -> CachePolicy:
    raw = (session.policy or {}).get("prompt_cache") or {}
    known = {k: v for k, v in raw.items() if k in _CACHE_POLICY_FIELDS and v is not None}
    return CachePolicy(**known)


def deferral_threshold(session: Session) -> float:
    value = (session.policy or {}).get("tool_deferral_threshold")
    return deferral.DEFAULT_DEFERRAL_THRESHOLD if value is None else value


@dataclass(frozen=True, slots=True)
class CacheProfile:
    min_cacheable: int
    prices: dict[str, Any]


_PROFILES: dict[tuple[str, str], tuple[float, CacheProfile]] = {}
# Profiles change when an operator edits them in the admin; a build may use a
# figure up to this old instead of querying them on every request.
PROFILE_TTL_SECONDS = 30.0


def cache_profile(session: Session) -> CacheProfile:
    """The model's minimum cacheable prefix and price table.

    Resolved like ``accounting.profile_limits``: the longest profile model name
    the session's model starts with ("claude-sonnet-4-5-20250929" → its family
    row), then the provider's row, then 1,024 tokens and no prices.
    """
    provider = session.provider or accounting.infer_provider(session.model)
    key = (provider, session.model)
    now = time.monotonic()
    cached = _PROFILES.get(key)
    if cached is not None and now - cached[0] < PROFILE_TTL_SECONDS:
        return cached[1]
    profile = _load_profile(provider, session.model)
    if len(_PROFILES) > 1000:
        _PROFILES.clear()
    _PROFILES[key] = (now, profile)
    return profile


def _load_profile(provider: str, model: str) -> CacheProfile:
    rows = list(
        ModelProfile.objects.filter(provider=provider).only(
            "model", "min_cacheable_tokens", "prices"
        )
    )
    provider_row = next((p for p in rows if p.model == ""), None)
    candidates = [p for p in rows if p.model and model.startswith(p.model)]
    model_row = max(candidates, key=lambda p: len(p.model), default=None)
    minimum = next(
        (
            row.min_cacheable_tokens
            for row in (model_row, provider_row)
            if row is not None and row.min_cacheable_tokens
        ),
        prompt.DEFAULT_MIN_CACHEABLE_TOKENS,
    )
    prices = next(
        (row.prices for row in (model_row, provider_row) if row is not None and row.prices), {}
    )
    return CacheProfile(min_cacheable=minimum, prices=dict(prices))


# --- token counts that are not stored on rows --------------------------------------------

_COUNTS: OrderedDict[tuple[str, bytes], int] = OrderedDict()
_COUNTS_LOCK = threading.Lock()
_COUNTS_SIZE = 4096


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
    with _COUNTS_LOCK:
        cached = _COUNTS.get(key)
        if cached is not None:
            _COUNTS.move_to_end(key)
            return cached
    value = estimate_text(text, tokenizer)
    with _COUNTS_LOCK:
        _COUNTS[key] = value
        if len(_COUNTS) > _COUNTS_SIZE:
            _COUNTS.popitem(last=False)
    return value


@lru_cache(maxsize=16)
def search_tool_tokens(tokenizer_name: str) -> int:
    return estimate_tool_def(deferral.TOOL_SEARCH, get_tokenizer(tokenizer_name))


def tool_digest(tool: ToolDef) -> str:
    return caching.block_key(
        tool.name, tool.description, compact_json(tool.input_schema), tool.category
    ).hex()


def list_digest(tools: Sequence[ToolDef], digests: dict[str, str] | None = None) -> str:
    """A digest of the whole tool list, order included."""
    return caching.block_key(
        *(f"{t.name}:{digests[t.name] if digests else tool_digest(t)}" for t in tools)
    ).hex()


def index_tools(tools: Sequence[ToolDef], tokenizer: Tokenizer) -> tuple[dict[str, list], str]:
    """Per-tool ``[tokens, digest]`` and the digest of the whole list."""
    index: dict[str, list] = {}
    for tool in tools:
        index[tool.name] = [estimate_tool_def(tool, tokenizer), tool_digest(tool)]
    return index, list_digest(tools, {name: value[1] for name, value in index.items()})


_TOOLSETS: OrderedDict[str, tuple[ToolDef, ...]] = OrderedDict()
_TOOLSETS_LOCK = threading.Lock()
_TOOLSETS_SIZE = 32


def registered_tools(session: Session, state: PromptState | None = None) -> list[ToolDef]:
    """The session's tool definitions as ToolDefs.

    The context endpoint and tool_search load the session with ``tools``
    deferred: 300 MCP tools are a megabyte of JSON, 10–20 ms to fetch and
    parse on every request. The parsed list is kept per process under the
    digest ``session_set_tools`` stored (``state.tools_hash``).
    """
    if "tools" not in session.get_deferred_fields():
        return [ToolDef(**t) for t in session.tools or ()]
    if state is not None and state.tools_hash:
        with _TOOLSETS_LOCK:
            cached = _TOOLSETS.get(state.tools_hash)
            if cached is not None:
                _TOOLSETS.move_to_end(state.tools_hash)
                return list(cached)
    raw = Session.objects.filter(pk=session.pk).values_list("tools", flat=True).first() or []
    tools = [ToolDef(**t) for t in raw]
    if state is not None and state.tools_hash:
        # Keyed by the digest of what was actually read: a PUT tools that
        # committed between reading the state and the tools is not mislabelled.
        digest = list_digest(tools)
        if digest == state.tools_hash:
            with _TOOLSETS_LOCK:
                _TOOLSETS[digest] = tuple(tools)
                if len(_TOOLSETS) > _TOOLSETS_SIZE:
                    _TOOLSETS.popitem(last=False)
    return tools


# --- state ------------------------------------------------------------------------------


def state_for(session: Session) -> PromptState:
    state = PromptState.objects.filter(session_id=session.pk).first()
    if state is not None:
        return state
    try:
        with transaction.atomic():
            return PromptState.objects.create(session_id=session.pk)
    except IntegrityError:
        # A concurrent build created it first.
        return PromptState.objects.get(session_id=session.pk)


# Columns only context builds read: tool_search and PUT tools lock the row without them.
BUILD_ONLY_FIELDS = (
    "last_chain",
    "last_build",
    "last_cached",
    "cache_totals",
    "degraded_log",
    "last_deferral",
)


def locked_state(session: Session, *, defer: Sequence[str] = ()) -> PromptState:
    qs = PromptState.objects.select_for_update()
    if defer:
        qs = qs.defer(*defer)
    state = qs.filter(session_id=session.pk).first()
    if state is None:
        state_for(session)  # created by whoever gets there first
        state = qs.get(session_id=session.pk)
    return state


def _degraded(component: str, exc: BaseException) -> dict[str, str]:
    return {
        "component": component,
        "error": f"{type(exc).__name__}: {exc}"[:500],
        "at": timezone.now().isoformat(),
    }


def deferral_inputs(session: Session) -> tuple[Tokenizer, float, int, float]:
    tokenizer = accounting.tokenizer_of(session)
    scale = accounting.estimate_config_of(session).tool_schema_scale
    threshold = deferral_threshold(session)
    limit = deferral.deferral_limit(accounting.limits_of(session).effective_window, threshold)
    return tokenizer, scale, limit, threshold


def _selection_record(
    *, turn: int, tools_hash: str, limit: int, scale: float, deferred: list[str]
) -> dict[str, Any]:
    return {
        "turn": turn,
        "tools_hash": tools_hash,
        "limit": limit,
        "scale": scale,
        "deferred": deferred,
    }


def tools_registered(*, session: Session, tools: Sequence[ToolDef]) -> int | None:
    """Called by ``session_set_tools`` inside its transaction (session row locked).

    Counts each tool once (the build never re-tokenizes schemas), chooses what
    to defer and returns the scaled tokens of what will be sent — the budget's
    ``tool_descriptions``. None when that fails: the caller then counts every
    tool, as before deferral existed (spec 002 §8).
    """
    try:
        tokenizer, scale, limit, _ = deferral_inputs(session)
        index, tools_hash = index_tools(tools, tokenizer)
        state = locked_state(session, defer=BUILD_ONLY_FIELDS)
        tokens = {name: value[0] for name, value in index.items()}
        search_tokens = search_tool_tokens(tokenizer.name)
        deferred = deferral.choose_deferred(
            tools,
            tokens,
            state.tool_last_used or {},
            limit_tokens=limit,
            scale=scale,
            search_tool_tokens=search_tokens,
        )
        # turn -1: the next build re-chooses with the LRU it learns then.
        state.tool_index = index
        state.tools_hash = tools_hash
        state.selection = _selection_record(
            turn=-1, tools_hash=tools_hash, limit=limit, scale=scale, deferred=deferred
        )
        state.save(update_fields=["tool_index", "tools_hash", "selection"])
        with _TOOLSETS_LOCK:
            _TOOLSETS[tools_hash] = tuple(tools)
            if len(_TOOLSETS) > _TOOLSETS_SIZE:
                _TOOLSETS.popitem(last=False)
        chosen = deferral.assemble(
            tools, tokens, deferred, (), scale=scale, search_tool_tokens=search_tokens
        )
        return chosen.tokens_sent
    except Exception:
        log.exception(
            "tool deferral failed while registering tools for session %s", session.external_id
        )
        return None


# --- 1. tools ---------------------------------------------------------------------------


@dataclass(slots=True)
class ToolPlan:
    tools: list[ToolDef]
    registered: list[ToolDef]
    selection: deferral.Selection | None = None
    tokens: dict[str, int] = field(default_factory=dict)  # unscaled, per tool
    digests: dict[str, str] = field(default_factory=dict)
    state: PromptState | None = None
    last_user_seq: int = 0
    threshold: float = deferral.DEFAULT_DEFERRAL_THRESHOLD
    limit: int = 0
    degraded: list[dict[str, str]] = field(default_factory=list)
    dirty: set[str] = field(default_factory=set)

    @property
    def note(self) -> str | None:
        return self.selection.note if self.selection is not None else None


def learn_from_messages(
    state: PromptState, session: Session, messages: Sequence[EngineMessage]
) -> int:
    """Update the tool LRU from assistant tool_calls posted since the last build.

    Only messages after ``state.scanned_seq`` are looked at, and they are
    already in memory (the live window the build loads anyway). Returns the
    seq of the newest user message: the start of the current turn.
    """
    last_user = 0
    for msg in reversed(messages):
        if msg.role == "user":
            last_user = msg.seq or 0
            break
    used: dict[str, int] = dict(state.tool_last_used or {})
    start = state.scanned_seq
    first_live = messages[0].seq if messages else None
    if first_live is not None and first_live > start + 1:
        # A compaction moved the live window past messages never scanned: read
        # just their tool_calls (rare, and bounded by that gap).
        gap = Message.objects.filter(
            session=session, role="assistant", seq__gt=start, seq__lt=first_live
        ).values_list("seq", "tool_calls")
        for seq, calls in gap:
            for call in calls or ():
                used[call["name"]] = max(used.get(call["name"], 0), seq)
        # Keep what the gap taught at once, even for builds that record nothing
        # (the dashboard's): otherwise every such build reads the gap again.
        # Idempotent: the same messages always teach the same seqs.
        start = first_live - 1
        state.tool_last_used, state.scanned_seq = used, start
        PromptState.objects.filter(pk=state.pk).update(tool_last_used=used, scanned_seq=start)
    seqs = [m.seq or 0 for m in messages]
    for msg in messages[bisect_right(seqs, start) :]:
        if msg.role == "assistant":
            for call in msg.tool_calls:
                used[call.name] = max(used.get(call.name, 0), msg.seq or 0)
    newest = max([start, *seqs[-1:]])
    if used != (state.tool_last_used or {}) or newest != start:
        state.tool_last_used = used
        state.scanned_seq = newest
    return last_user


def promoted_names(state: PromptState, last_user: int, deferred: Sequence[str]) -> list[str]:
    """Deferred tools sent anyway for the rest of this turn, in the order they came in:
    loaded by ``tool_search`` in this turn, or called by the model in this turn."""
    deferred_set = set(deferred)
    since: dict[str, int] = {}
    for name, seq in (state.loaded or {}).items():
        if name in deferred_set and seq >= last_user:
            since[name] = min(seq, since.get(name, seq))
    for name, seq in (state.tool_last_used or {}).items():
        if name in deferred_set and seq > last_user:
            since[name] = min(seq, since.get(name, seq))
    return sorted(since, key=lambda n: (since[n], n))


def ensure_index(
    state: PromptState, session: Session, tools: Sequence[ToolDef], tokenizer: Tokenizer
) -> None:
    index = state.tool_index or {}
    if len(index) != len(tools) or any(t.name not in index for t in tools):
        # Tools stored before this state existed (or a lost write): count them once now.
        state.tool_index, state.tools_hash = index_tools(tools, tokenizer)
        PromptState.objects.filter(pk=state.pk).update(
            tool_index=state.tool_index, tools_hash=state.tools_hash
        )


def select_tools(
    session: Session, messages: Sequence[EngineMessage], *, record: bool = True
) -> ToolPlan:
    """spec 002 §5 SelectForContext, with the state it needs. Never raises.

    The budget counts what is sent: when the selection changes the sent
    tokens, the session's ``tool_tokens`` follows (in memory only when
    ``record`` is False, for a preview)."""
    plan = ToolPlan(tools=[], registered=[])
    try:
        state = state_for(session)
        plan.state = state
        registered = registered_tools(session, state)
        plan.registered, plan.tools = registered, list(registered)
        before = (dict(state.tool_last_used or {}), state.scanned_seq)
        plan.last_user_seq = learn_from_messages(state, session, messages)
        if (state.tool_last_used or {}, state.scanned_seq) != before:
            plan.dirty.update({"tool_last_used", "scanned_seq"})
        if not registered:
            return plan
        tokenizer, scale, limit, threshold = deferral_inputs(session)
        plan.threshold, plan.limit = threshold, limit
        ensure_index(state, session, registered, tokenizer)
        plan.tokens = {name: value[0] for name, value in state.tool_index.items()}
        plan.digests = {name: value[1] for name, value in state.tool_index.items()}
        search_tokens = search_tool_tokens(tokenizer.name)
        sel = state.selection or {}
        if (
            sel.get("turn") != plan.last_user_seq
            or sel.get("tools_hash") != state.tools_hash
            or sel.get("limit") != limit
            or sel.get("scale") != scale
        ):
            # Re-chosen once per turn: within a turn the tool list — the start
            # of every cached prefix — stays put while the agent loops.
            deferred = deferral.choose_deferred(
                registered,
                plan.tokens,
                state.tool_last_used or {},
                limit_tokens=limit,
                scale=scale,
                search_tool_tokens=search_tokens,
            )
            state.selection = _selection_record(
                turn=plan.last_user_seq,
                tools_hash=state.tools_hash,
                limit=limit,
                scale=scale,
                deferred=deferred,
            )
            plan.dirty.add("selection")
        deferred_names = list(state.selection.get("deferred") or [])
        selection = deferral.assemble(
            registered,
            plan.tokens,
            deferred_names,
            promoted_names(state, plan.last_user_seq, deferred_names),
            scale=scale,
            search_tool_tokens=search_tokens,
        )
        if selection.search_tool_added:
            plan.tokens[deferral.TOOL_SEARCH_NAME] = search_tokens
        plan.selection = selection
        plan.tools = list(selection.active)
        if selection.tokens_sent != session.tool_tokens:
            if record:
                from sessions.services.tools import session_set_sent_tool_tokens

                session_set_sent_tool_tokens(session=session, tokens=selection.tokens_sent)
            else:
                session.tool_tokens = selection.tokens_sent
    except Exception as exc:
        log.exception(
            "tool deferral failed for session %s; sending every tool", session.external_id
        )
        if not plan.registered:
            plan.registered = [ToolDef(**t) for t in session.tools or ()]
        plan.tools = list(plan.registered)
        plan.selection = None
        plan.degraded.append(_degraded("deferral", exc))
        _restore_full_tool_tokens(session, plan, record=record)
    return plan


def _restore_full_tool_tokens(session: Session, plan: ToolPlan, *, record: bool) -> None:
    """All tools are sent: the budget must count all of them again."""
    try:
        if plan.tokens and all(t.name in plan.tokens for t in plan.registered):
            scale = accounting.estimate_config_of(session).tool_schema_scale
            full = deferral.scaled(sum(plan.tokens[t.name] for t in plan.registered), scale)
            if full != session.tool_tokens and record:
                from sessions.services.tools import session_set_sent_tool_tokens

                session_set_sent_tool_tokens(session=session, tokens=full)
            elif full != session.tool_tokens:
                session.tool_tokens = full
    except Exception:
        log.exception("could not restore the tool count of session %s", session.external_id)


# --- 2. sections and breakpoints ----------------------------------------------------------


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
) -> PromptPlan:
    """spec 002 §4: order the sections and place the breakpoints. Never raises."""
    try:
        ordered = prompt.order_sections([PromptSection(**s) for s in session.sections or ()])
        system, _tail = prompt.split_sections(ordered)
        tokenizer = accounting.tokenizer_of(session)
        policy = cache_policy(session)
        result = PromptPlan(sections=ordered, policy=policy)
        result.system_tokens = [count_text(s.content, tokenizer) for s in system]
        result.tool_tokens = sent_tool_tokens(tools, tool_plan, tokenizer)
        result.profile = cache_profile(session)
        if policy.enabled:
            history = _preamble_tokens(session, tokenizer) + sum(
                m.token_count or 0 for m in messages
            )
            result.cache = prompt.plan_breakpoints(
                system,
                prompt.PlanInput(
                    tool_tokens=result.tool_tokens,
                    system_tokens=result.system_tokens,
                    history_tokens=history,
                    has_history=bool(messages) or bool(session.retain or session.summary),
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
    """spec 002 §8: "PromptBuilder fails → string concatenation fallback"."""
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
    return PromptPlan(sections=sections, plain=True, degraded=[_degraded("sections", exc)])


# --- 3. accounting and the state save --------------------------------------------------------


def cache_mode(fmt: str, session: Session, plan: PromptPlan) -> str:
    if fmt == "openai":
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
    view = -1 if msg.view is None else len(msg.view)
    return (
        f"m\x1f{msg.seq}\x1f{msg.role}\x1f{msg.view_state}\x1f{view}\x1f{msg.token_count}"
    ).encode()


def account(
    session: Session,
    fmt: str,
    parts: ContextParts,
    tool_plan: ToolPlan,
    prompt_plan: PromptPlan,
    state: PromptState,
    now: datetime,
) -> dict[str, Any]:
    """Cache accounting of one build; updates ``state`` in memory (saved by the caller)."""
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
    for msg in preamble_messages(parts):
        keys.append(caching.block_key("preamble", msg.text))
        tokens.append(count_text(msg.text, tokenizer) + 4)
    for msg in parts.messages:
        keys.append(_message_key(msg))
        tokens.append(msg.token_count or 0)
    if plan is not None and plan.history and len(keys) > offset + len(lay.system):
        marks.append(len(keys) - 1)
    tail_tokens = sum(count_text(t, tokenizer) for t in lay.tail)
    tail_tokens += count_text(parts.final_instruction, tokenizer)

    mode = cache_mode(fmt, session, prompt_plan)
    ttl = prompt_plan.policy.ttl
    current = caching.chain(keys)
    previous = bytes(state.last_chain or b"") or None
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
    state.last_chain = current
    state.last_cached = caching.cached_after(estimate, marks)
    state.last_mode = mode
    state.last_built_at = now
    state.last_build = record
    state.cache_totals = totals
    return record


def deferral_block(state: PromptState | None, tool_plan: ToolPlan | None = None) -> dict[str, Any]:
    """The budget's ``deferral`` block: live from a build, else the last build's."""
    if tool_plan is not None and tool_plan.selection is not None:
        sel = tool_plan.selection
        base: dict[str, Any] = {
            "active": bool(sel.deferred or sel.loaded),
            "threshold_ratio": tool_plan.threshold,
            "limit_tokens": tool_plan.limit,
            "registered_tools": len(tool_plan.registered),
            "sent_tools": len(sel.active),
            "deferred_count": len(sel.deferred),
            "deferred": list(sel.deferred),
            "loaded": list(sel.loaded),
            "tokens_all": sel.tokens_all,
            "tokens_sent": sel.tokens_sent,
            "tokens_saved": sel.tokens_saved,
        }
    elif tool_plan is not None:
        base = {
            "active": False,
            "registered_tools": len(tool_plan.registered),
            "sent_tools": len(tool_plan.tools),
            "deferred_count": 0,
            "deferred": [],
            "loaded": [],
            "tokens_saved": 0,
        }
    else:
        base = (
            dict(state.last_deferral)
            if state is not None and state.last_deferral
            else {
                "active": False,
                "deferred_count": 0,
                "deferred": [],
                "loaded": [],
                "tokens_saved": 0,
            }
        )
    if state is not None:
        base["tokens_saved_total"] = state.tokens_saved_total
        base["search_count"] = state.search_count
        base["searched"] = state.searched or {}
        base["loaded_total"] = state.loaded_total or {}
        base["recent_searches"] = state.recent_searches or []
    return base


def finish_build(
    session: Session,
    fmt: str,
    parts: ContextParts,
    tool_plan: ToolPlan,
    prompt_plan: PromptPlan,
    degraded: Sequence[dict[str, str]] = (),
    *,
    record: bool = True,
) -> dict[str, Any]:
    """Account the build, save the state, and return the budget's extra blocks:
    ``cache``, ``deferral`` and ``degraded``. Never raises. ``record=False``
    computes the same figures and saves nothing."""
    failures = [*tool_plan.degraded, *prompt_plan.degraded, *degraded]
    state = tool_plan.state
    build_record: dict[str, Any] | None = None
    now = timezone.now()
    try:
        if state is None:
            state = state_for(session)
        build_record = account(session, fmt, parts, tool_plan, prompt_plan, state, now)
    except Exception as exc:
        log.exception("cache accounting failed for session %s", session.external_id)
        failures.append(_degraded("accounting", exc))
    deferral_info = deferral_block(state, tool_plan)
    if state is not None and record:
        try:
            saved = tool_plan.selection.tokens_saved if tool_plan.selection is not None else 0
            # Only what changed: within a turn the LRU and the selection rarely do.
            update: dict[str, Any] = {f: getattr(state, f) for f in tool_plan.dirty}
            last_deferral = {
                k: v
                for k, v in deferral_info.items()
                if k
                not in (
                    "searched",
                    "loaded_total",
                    "recent_searches",
                    "search_count",
                    "tokens_saved_total",
                )
            }
            if last_deferral != (state.last_deferral or {}):
                update["last_deferral"] = state.last_deferral = last_deferral
            if failures or state.degraded:
                update["degraded"] = failures
            if failures:
                update["degraded_log"] = [*(state.degraded_log or []), *failures][
                    -DEGRADED_LOG_SIZE:
                ]
            if build_record is not None:
                update.update(
                    last_chain=state.last_chain,
                    last_cached=state.last_cached,
                    last_mode=state.last_mode,
                    last_built_at=state.last_built_at,
                    last_build=build_record,
                    cache_totals=state.cache_totals,
                )
            if saved:
                # F(): tool_search does not write this column, but builds may race.
                update["tokens_saved_total"] = F("tokens_saved_total") + saved
            if update:
                PromptState.objects.filter(pk=state.pk).update(**update)
            state.tokens_saved_total += saved
            deferral_info["tokens_saved_total"] = state.tokens_saved_total
        except Exception as exc:
            log.exception("could not save the prompt state of session %s", session.external_id)
            failures.append(_degraded("state", exc))
    return {
        "cache": cache_block(
            session,
            state,
            build_record,
            policy=prompt_plan.policy,
            profile=prompt_plan.profile,
            with_reported=False,
        ),
        "deferral": deferral_info,
        "degraded": failures,
    }


# --- reads for the budget ------------------------------------------------------------------


def _reported(session: Session, prices: caching.Prices | None, ttl: str) -> dict[str, Any]:
    latest = UsageReport.objects.filter(session=session).order_by("-id").first()
    totals = UsageReport.objects.filter(session=session).aggregate(
        calls=Count("id"),
        input_tokens=Sum("input_tokens"),
        cache_creation_input_tokens=Sum("cache_creation_tokens"),
        cache_read_input_tokens=Sum("cache_read_tokens"),
        output_tokens=Sum("output_tokens"),
    )
    totals = {k: int(v or 0) for k, v in totals.items()}
    totals_input = (
        totals["input_tokens"]
        + totals["cache_creation_input_tokens"]
        + totals["cache_read_input_tokens"]
    )
    totals["cache_read_ratio"] = (
        round(totals["cache_read_input_tokens"] / totals_input, 4) if totals_input else 0.0
    )
    if prices is not None:
        totals["cost_usd"] = caching.cost_usd(
            prices,
            input_tokens=totals["input_tokens"],
            cache_write_tokens=totals["cache_creation_input_tokens"],
            cache_read_tokens=totals["cache_read_input_tokens"],
            output_tokens=totals["output_tokens"],
            ttl=ttl,
        )
    last = None
    if latest is not None:
        last = {
            "through_seq": latest.through_seq,
            "input_tokens": latest.input_tokens,
            "cache_creation_input_tokens": latest.cache_creation_tokens,
            "cache_read_input_tokens": latest.cache_read_tokens,
            "output_tokens": latest.output_tokens,
            "at": latest.created_at.isoformat(),
        }
        sent = latest.input_tokens + latest.cache_creation_tokens + latest.cache_read_tokens
        last["cache_read_ratio"] = round(latest.cache_read_tokens / sent, 4) if sent else 0.0
        if prices is not None:
            last["cost_usd"] = caching.cost_usd(
                prices,
                input_tokens=latest.input_tokens,
                cache_write_tokens=latest.cache_creation_tokens,
                cache_read_tokens=latest.cache_read_tokens,
                output_tokens=latest.output_tokens,
                ttl=ttl,
            )
    return {"last": last, "totals": totals}


def cache_block(
    session: Session,
    state: PromptState | None,
    record: dict[str, Any] | None = None,
    *,
    policy: CachePolicy | None = None,
    profile: CacheProfile | None = None,
    with_reported: bool = True,
) -> dict[str, Any]:
    """Estimated (from our builds) and reported (from POST usage) side by side.

    The context response leaves the reported side out (``with_reported``):
    it costs two queries on the hot path, and GET budget shows it.
    """
    policy = policy or cache_policy(session)
    profile = profile or cache_profile(session)
    prices = caching.Prices.from_table(profile.prices)
    if record is None and state is not None and state.last_build:
        record = state.last_build
    reported = (
        _reported(session, prices, policy.ttl) if with_reported else {"last": None, "totals": None}
    )
    last = reported["last"]
    side_by_side = None
    if record is not None and with_reported:
        side_by_side = {
            "cache_read_tokens": {
                "estimated": record.get("cache_read_tokens"),
                "reported": last["cache_read_input_tokens"] if last else None,
            },
            "cache_write_tokens": {
                "estimated": record.get("cache_write_tokens"),
                "reported": last["cache_creation_input_tokens"] if last else None,
            },
            "uncached_input_tokens": {
                "estimated": record.get("uncached_input_tokens"),
                "reported": last["input_tokens"] if last else None,
            },
            "input_cost_usd": {
                "estimated": record.get("input_cost_usd"),
                "reported": (
                    caching.cost_usd(
                        prices,
                        input_tokens=last["input_tokens"],
                        cache_write_tokens=last["cache_creation_input_tokens"],
                        cache_read_tokens=last["cache_read_input_tokens"],
                        ttl=policy.ttl,
                    )
                    if last and prices is not None
                    else None
                ),
            },
        }
    return {
        "enabled": policy.enabled,
        "ttl": policy.ttl,
        "min_cacheable_tokens": policy.min_cacheable_tokens or profile.min_cacheable,
        "prices": prices.to_dict() if prices is not None else None,
        "last_build": record,
        "reported": last,
        "side_by_side": side_by_side,
        "totals": {
            "estimated": (state.cache_totals if state is not None else {}) or {},
            "reported": reported["totals"],
        },
    }


def budget_blocks(session: Session) -> dict[str, Any]:
    """``cache``, ``deferral`` and ``degraded`` for GET budget (no build)."""
    try:
        state = PromptState.objects.filter(session_id=session.pk).first()
        return {
            "cache": cache_block(session, state),
            "deferral": deferral_block(state),
            "degraded": (state.degraded if state is not None else []) or [],
        }
    except Exception as exc:
        log.exception("prompt state unreadable for session %s", session.external_id)
        return {"cache": None, "deferral": None, "degraded": [_degraded("accounting", exc)]}
