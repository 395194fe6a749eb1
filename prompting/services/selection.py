"""Which tools a build sends (docs/concepts/deferral.md#deferral-order): the LRU learned from
the messages, the per-turn deferral choice, promotions, and recording the plan."""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextsvc.engine import deferral
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import ToolDef
from contextsvc.lru import BoundedLRU
from sessions import accounting
from sessions.models import Message, Session
from sessions.services.tools import session_set_sent_tool_tokens

from ..models import PromptState
from .policy import deferral_inputs, deferral_note_style
from .state import degraded_entry, state_read
from .tools import recount_stale_index, registered_tools, search_tool_tokens, selection_record

log = logging.getLogger("contextsvc.prompting")


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
    # State columns a recording build saves with its accounting (``build_record_save``).
    dirty: set[str] = field(default_factory=set)
    # State columns a recording build saves at once: a recounted index, what a
    # compaction gap taught (otherwise every build would read the gap again).
    early: dict[str, Any] = field(default_factory=dict)
    # The scaled tool tokens the session must count from now on, when they changed.
    sent_tokens: int | None = None

    @property
    def note(self) -> str | None:
        return self.selection.note if self.selection is not None else None


# What the assistant messages between two seqs called, per process:
# (session pk, created_at, after seq, before seq) → {name: newest seq}. Stored
# tool_calls never change (tool clearing keeps them for audit), so the same gap
# always teaches the same; previews, which save nothing, read it once.
_GAPS: BoundedLRU[tuple[int, Any, int, int], dict[str, int]] = BoundedLRU(256)


def _gap_tool_uses(session: Session, after_seq: int, before_seq: int) -> dict[str, int]:
    """Tool uses a compaction moved out of the live window before a build saw them:
    just their tool_calls are read (rare, and bounded by that gap)."""
    key = (session.pk, session.created_at, after_seq, before_seq)
    uses = _GAPS.get(key)
    if uses is None:
        uses = {}
        gap = Message.objects.filter(
            session=session, role="assistant", seq__gt=after_seq, seq__lt=before_seq
        ).values_list("seq", "tool_calls")
        for seq, calls in gap:
            for call in calls or ():
                uses[call["name"]] = max(uses.get(call["name"], 0), seq)
        _GAPS.put(key, uses)
    return uses


def _seq(msg: EngineMessage) -> int:
    return msg.seq or 0


def learn_from_messages(
    state: PromptState, session: Session, messages: Sequence[EngineMessage]
) -> tuple[int, dict[str, Any] | None]:
    """Update the tool LRU (in memory) from assistant tool_calls posted since the last build.

    Only messages after ``state.scanned_seq`` are looked at, and they are
    already in memory (the live window the build loads anyway). Returns the
    seq of the newest user message (the start of the current turn) and, when a
    compaction moved the window past messages never scanned, the columns of
    what that gap taught.
    """
    last_user = 0
    for msg in reversed(messages):
        if msg.role == "user":
            last_user = msg.seq or 0
            break
    used: dict[str, int] = dict(state.tool_last_used or {})
    start = state.scanned_seq
    gap_columns = None
    first_live = messages[0].seq if messages else None
    if first_live is not None and first_live > start + 1:
        for name, seq in _gap_tool_uses(session, start, first_live).items():
            used[name] = max(used.get(name, 0), seq)
        start = first_live - 1
        state.tool_last_used, state.scanned_seq = used, start
        gap_columns = {"tool_last_used": dict(used), "scanned_seq": start}
    # A bisection, not a list of every seq: only what was posted since is read.
    for msg in messages[bisect_right(messages, start, key=_seq) :]:
        if msg.role == "assistant":
            for call in msg.tool_calls:
                used[call.name] = max(used.get(call.name, 0), msg.seq or 0)
    newest = max(start, _seq(messages[-1])) if messages else start
    if used != (state.tool_last_used or {}) or newest != start:
        state.tool_last_used = used
        state.scanned_seq = newest
    return last_user, gap_columns


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


def plan_tools(
    session: Session,
    messages: Sequence[EngineMessage],
    *,
    load_state: Callable[[Session], PromptState] = state_read,
) -> ToolPlan:
    """docs/concepts/deferral.md#deferral-order, in memory: nothing is written. Never raises.

    ``load_state`` gives the state to plan with (a recording build passes
    ``state_get_or_create``). The budget counts what is sent: when the
    selection changes the sent tokens, ``plan.sent_tokens`` says so
    (``tools_record_plan`` saves them)."""
    plan = ToolPlan(tools=[], registered=[])
    try:
        state = load_state(session)
        plan.state = state
        registered = registered_tools(session, state)
        plan.registered, plan.tools = registered, list(registered)
        before = (dict(state.tool_last_used or {}), state.scanned_seq)
        plan.last_user_seq, gap = learn_from_messages(state, session, messages)
        if gap is not None:
            plan.early.update(gap)
        if (state.tool_last_used or {}, state.scanned_seq) != before:
            plan.dirty.update({"tool_last_used", "scanned_seq"})
        if not registered:
            return plan
        tokenizer, scale, limit, threshold = deferral_inputs(session)
        plan.threshold, plan.limit = threshold, limit
        if recount_stale_index(state, registered, tokenizer):
            plan.early.update(tool_index=state.tool_index, tools_hash=state.tools_hash)
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
                note_style=deferral_note_style(session),
                uncounted=accounting.uncounted_tools(session),
            )
            state.selection = selection_record(
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
            note_style=deferral_note_style(session),
            uncounted=accounting.uncounted_tools(session),
        )
        if selection.search_tool_added:
            plan.tokens[deferral.TOOL_SEARCH_NAME] = search_tokens
        plan.selection = selection
        plan.tools = list(selection.active)
        if selection.tokens_sent != session.tool_tokens:
            plan.sent_tokens = selection.tokens_sent
    except Exception as exc:
        _send_every_tool(session, plan, exc)
    return plan


def _send_every_tool(session: Session, plan: ToolPlan, exc: BaseException) -> None:
    """docs/concepts/deferral.md#deferral-fallback: deferral failed, so every tool is sent and the
    budget counts them all."""
    log.exception(
        "tool deferral failed for session %s; sending every tool",
        session.external_id,
        exc_info=exc,
    )
    if not plan.registered:
        plan.registered = [ToolDef(**t) for t in session.tools or ()]
    plan.tools = list(plan.registered)
    plan.selection = None
    plan.degraded.append(degraded_entry("deferral", exc))
    plan.sent_tokens = None
    try:
        if plan.tokens and all(t.name in plan.tokens for t in plan.registered):
            scale = accounting.estimate_config_of(session).tool_schema_scale
            uncounted = accounting.uncounted_tools(session)
            full = deferral.scaled(
                sum(plan.tokens[t.name] for t in plan.registered if t.name not in uncounted),
                scale,
            )
            if full != session.tool_tokens:
                plan.sent_tokens = full
    except Exception:
        log.exception("could not restore the tool count of session %s", session.external_id)


def tools_record_plan(session: Session, plan: ToolPlan) -> None:
    """Save what planning found before the build uses it: the state columns that
    cannot wait and the session's sent tool tokens. A failure here degrades
    the plan to every tool, as a failure while planning would."""
    try:
        if plan.early and plan.state is not None:
            PromptState.objects.filter(pk=plan.state.pk).update(**plan.early)
        if plan.sent_tokens is not None:
            session_set_sent_tool_tokens(session=session, tokens=plan.sent_tokens)
    except Exception as exc:
        _send_every_tool(session, plan, exc)
        if plan.sent_tokens is not None:
            try:
                session_set_sent_tool_tokens(session=session, tokens=plan.sent_tokens)
            except Exception:
                log.exception("could not restore the tool count of session %s", session.external_id)
