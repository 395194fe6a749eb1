"""The tool-output rules of an append, under the session lock: budget trim and tool preflight.

The trim (docs/concepts/trimming.md#budget-trim) and the tool preflight
(docs/concepts/guard.md#tool-preflight): an output that would overflow gets the failure view.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from django.db.models import Max, Sum
from django.utils import timezone

from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.output_fit import NEWEST_SHARE, head_tail_view
from contextsvc.engine.output_trim import (
    MIN_TRIM_SAVING,
    TrimCandidate,
    admit_outputs,
    plan_trim,
    tool_output_budget,
    trimmed_view,
)
from contextsvc.engine.output_views import OutputInfo, ViewConfig, failed_view, resolve_view_config
from contextsvc.engine.recall import search_available
from contextsvc.engine.tokens import estimate_message, estimate_text

from .. import accounting
from ..extensions import REGISTRY
from ..models import Message, Session
from .ingest import PreparedMessage
from .store import new_ref

# Views that still hold (part of) an output, so they count toward the tool
# output budget and may be trimmed. "trimmed", "failed" and "cleared" do not.
TRIMMABLE_STATES = ("full", "cut", "offloaded")
_CANDIDATE_PAGE = 100
_FIELDS = ("pk", "seq", "token_count", "output_ref", "tool_call_id", "name")


def tool_budget_sticky(session: Session) -> bool:
    """``policy.tool_budget_sticky``: docs/concepts/guard.md#sticky-refusal."""
    return bool((session.policy or {}).get("tool_budget_sticky"))


def cache_config(session: Session) -> ViewConfig:
    """The session's ``policy.tool_output_cache`` (docs/concepts/trimming.md#presets)."""
    config = resolve_view_config(
        (session.policy or {}).get("tool_output_cache"), limit=_effective_window(session)
    )
    return replace(config, search_hint=search_available(session.policy))


def _effective_window(session: Session) -> int:
    return accounting.limits_of(session).limit


def session_recount_tool_outputs(session: Session) -> None:
    """Recompute the cached tool-output counters from the live window.

    The append path does this by itself once the live window has moved (a
    compaction); call it after changing tool views in place (tool clearing).
    The caller holds the session lock and saves the session.
    """
    live = Message.objects.filter(
        session=session,
        role="tool",
        seq__gte=session.window_start_seq,
        output_ref__isnull=False,
        retracted_at__isnull=True,
    )
    total = live.filter(view_state__in=TRIMMABLE_STATES).aggregate(t=Sum("token_count"))["t"]
    newest_trimmed = live.filter(view_state="trimmed").aggregate(s=Max("seq"))["s"]
    session.tool_output_tokens = total or 0
    session.tool_trim_seq = newest_trimmed or 0
    session.tool_count_window_seq = session.window_start_seq


def _stored_candidates(session: Session, placeholder: int) -> Iterator[TrimCandidate]:
    """Untrimmed outputs already stored, oldest first, a page at a time.

    Trimming is oldest first, so everything up to ``tool_trim_seq`` is already
    trimmed: the scan starts after it and reads only what gets trimmed now.
    """
    after = max(session.tool_trim_seq, session.window_start_seq - 1)
    while True:
        rows = list(
            Message.objects.filter(
                session=session,
                role="tool",
                seq__gt=after,
                view_state__in=TRIMMABLE_STATES,
                output_ref__isnull=False,
                retracted_at__isnull=True,
            )
            .order_by("seq")
            .values_list(*_FIELDS)[:_CANDIDATE_PAGE]
        )
        for row in rows:
            yield TrimCandidate(key=("stored", row), tokens=row[2], placeholder_tokens=placeholder)
        if len(rows) < _CANDIDATE_PAGE:
            return
        after = rows[-1][1]


def trim_info(reason: str, detail: str) -> dict[str, str]:
    """Why and when a view was replaced by a placeholder (``Message.trim_info``)."""
    return {"reason": reason, "detail": detail, "at": timezone.now().isoformat()}


def _compaction_can_help(session: Session) -> bool:
    return any(check(session) for check in REGISTRY.compaction_available)


@dataclass(slots=True)
class ToolEffects:
    """What the tool-output rules did to one appended batch."""

    trimmed_seqs: list[int] = field(default_factory=list)
    failed_seqs: list[int] = field(default_factory=list)
    # Outputs that overflow the limit even when cut (or as placeholders, when
    # no cut fits) while compaction could still make room: compaction is due now.
    overflow_seqs: list[int] = field(default_factory=list)
    conversation_delta: int = 0  # change to stored rows' tokens (negative: freed)

    @property
    def budget_exceeded(self) -> bool:
        return bool(self.failed_seqs)


def _placeholder_tokens(
    view: str, tool_call_id: str | None, name: str | None, session: Session
) -> int:
    msg = EngineMessage(role="tool", view=view, tool_call_id=tool_call_id, name=name)
    return estimate_message(
        msg, accounting.tokenizer_of(session), accounting.estimate_config_of(session)
    )


def _fitted_view(
    session: Session, state: accounting.BudgetState, message: EngineMessage
) -> str | None:
    """The output's head and tail within ``NEWEST_SHARE`` of the history room (the
    effective window less the fixed part), or None when no cut fits."""
    budget = state.budget
    fixed = budget.system_prompt + budget.skill_prompts + budget.tool_descriptions
    room = max(0, budget.effective_window - fixed - state.reserved)
    tokenizer = accounting.tokenizer_of(session)
    return head_tail_view(
        message.context_text,
        message.output_ref,
        int(NEWEST_SHARE * room),
        lambda text: estimate_text(text, tokenizer),
        search_available(session.policy),
    )


def _release_reservations(session: Session, prepared: Sequence[PreparedMessage]) -> None:
    """Free a result's reservation, else the oldest: docs/concepts/guard.md#tool-budget."""
    reservations = dict(session.tool_reservations or {})
    if not reservations:
        return
    for p in prepared:
        if p.message.role != "tool":
            continue
        key = p.message.tool_call_id or ""
        if key in reservations:
            reservations.pop(key)
            continue
        anonymous = sorted((k for k in reservations if k.startswith("~")), key=lambda k: int(k[1:]))
        if anonymous:
            reservations.pop(anonymous[0])
    session.tool_reservations = reservations
    session.reserved_tokens = sum(reservations.values())


def apply_tool_outputs(
    session: Session, prepared: Sequence[PreparedMessage], first_seq: int
) -> ToolEffects:
    """The tool-output rules of one append, run under the session row lock.

    1. Release the reservations of the posted tool results (docs/concepts/guard.md#tool-budget).
    2. The trim (docs/concepts/trimming.md#budget-trim): if the untrimmed outputs now exceed the
       budget, the oldest become placeholders down to (1 − hysteresis) × budget.
       Decided from the cached counter; stored rows are read only when some
       are trimmed, and only those.
    3. docs/concepts/guard.md#tool-preflight: a tool result that would push the projection
       past the limit gets the failure view instead (stored in full all the
       same) and the session turns final (toolBudgetExceeded).

    Rows of the batch (``prepared``, seq ``first_seq + i``) are changed in
    place; stored rows are updated here. The session's counters are updated
    on the object; the caller saves it.
    """
    effects = ToolEffects()
    if session.tool_count_window_seq != session.window_start_seq:
        session_recount_tool_outputs(session)
    _release_reservations(session, prepared)
    batch = [
        (i, p)
        for i, p in enumerate(prepared)
        if p.message.role == "tool"
        and p.row.get("output_ref")
        and p.row["view_state"] in TRIMMABLE_STATES
    ]
    if not batch:
        return effects
    config = cache_config(session)
    sticky = tool_budget_sticky(session)

    # 2. refusals first: an output that would not fit even with every older
    # output trimmed is refused before anything is trimmed for it.
    refused, overflowing = _refuse_what_cannot_fit(
        session, prepared, batch, first_seq, effects, sticky
    )
    batch = [(i, p) for i, p in batch if i not in refused]

    # 3. budget trim (docs/concepts/trimming.md#budget-trim), when outputs exceed theirs
    added = sum(p.row["token_count"] for _, p in batch)
    total = session.tool_output_tokens + added
    budget = tool_output_budget(config, session.context_window, _effective_window(session))
    # Each trim breaks the cached prefix and re-writes all after it: with a
    # derived budget and automatic compaction on, old outputs are cleared in
    # one batch by the next compaction instead (engine.planner). An explicit
    # budget, or no compaction to count on: docs/concepts/trimming.md#trim-with-compaction.
    if (
        config.budget_trim
        and total > budget
        and not (config.context_budget_tokens is None and _compaction_can_help(session))
    ):
        # Placeholders differ only by their ref (same length), so one count serves all.
        sample_ref = batch[0][1].row["output_ref"] if batch else new_ref()
        placeholder = _placeholder_tokens(trimmed_view(sample_ref), None, None, session)
        fresh = (
            TrimCandidate(
                key=("batch", i), tokens=p.row["token_count"], placeholder_tokens=placeholder
            )
            for i, p in batch
        )
        plan = plan_trim(
            total,
            budget,
            itertools.chain(_stored_candidates(session, placeholder), fresh),
            hysteresis=config.trim_hysteresis,
            min_saving=MIN_TRIM_SAVING,
        )
        info = trim_info(
            "budget",
            f"tool outputs in context {total:,} > budget {budget:,} tokens; "
            f"trimmed oldest first down to {plan.target:,}",
        )
        stored_updates: list[Message] = []
        for kind, item in plan.trimmed:
            if kind == "stored":
                pk, seq, tokens, ref, call_id, name = item
                view = trimmed_view(ref)
                new_tokens = _placeholder_tokens(view, call_id, name, session)
                stored_updates.append(
                    Message(
                        pk=pk,
                        view=view,
                        view_state="trimmed",
                        token_count=new_tokens,
                        trim_info={**info, "tokens_before": tokens},
                    )
                )
                effects.conversation_delta += new_tokens - tokens
                session.tool_output_tokens -= tokens
                effects.trimmed_seqs.append(seq)
            else:
                p = prepared[item]
                view = trimmed_view(p.row["output_ref"])
                p.row.update(
                    view=view,
                    view_state="trimmed",
                    trim_info={**info, "tokens_before": p.row["token_count"]},
                    token_count=_placeholder_tokens(
                        view, p.row["tool_call_id"], p.row["name"], session
                    ),
                )
                effects.trimmed_seqs.append(first_seq + item)
        if stored_updates:
            Message.objects.bulk_update(
                stored_updates, ["view", "view_state", "token_count", "trim_info"]
            )
        if effects.trimmed_seqs:
            session.tool_trim_seq = max(session.tool_trim_seq, max(effects.trimmed_seqs))
        session.conversation_tokens = max(
            0, session.conversation_tokens + effects.conversation_delta
        )

    # 4. tool preflight, message by message in batch order (what the trim left)
    base = session.conversation_tokens
    running = 0
    for i, p in enumerate(prepared):
        tokens = p.row["token_count"]
        row = p.row
        if (
            p.message.role == "tool"
            and row.get("output_ref")
            and row["view_state"] not in ("trimmed", "failed")
        ):
            forced = i in overflowing  # refused before the trim: cut, never failed
            over = forced or (sticky and session.tool_budget_exceeded)
            if forced or not over:
                session.conversation_tokens = base + running + tokens
                state = accounting.compute_budget(session)
                over = forced or state.guard.status == "final"
                if over and (forced or _compaction_can_help(session)):
                    # With compaction available, ending the session would throw
                    # away a run that a summary can save. The agent acts on the
                    # result it just asked for, so the output keeps its head and
                    # tail, cut to a share of the history room (engine.output_fit);
                    # only when no cut fits does it become a trimmed placeholder
                    # (docs/concepts/trimming.md#budget-trim). The caller asks for
                    # compaction at once when it still does not fit; the final
                    # turn (docs/concepts/guard.md#final-turn) is for when it cannot help.
                    view, view_state = _fitted_view(session, state, p.message), "cut"
                    if view is None:
                        view, view_state = trimmed_view(row["output_ref"]), "trimmed"
                    before = tokens
                    tokens = _placeholder_tokens(view, row["tool_call_id"], row["name"], session)
                    reason = "would overflow the window; compaction makes room"
                    row.update(
                        view=view,
                        view_state=view_state,
                        token_count=tokens,
                        trim_info={**trim_info("overflow", reason), "tokens_before": before},
                    )
                    session.conversation_tokens = base + running + tokens
                    if accounting.compute_budget(session).guard.status == "final":
                        effects.overflow_seqs.append(first_seq + i)
                    if view_state == "trimmed":
                        effects.trimmed_seqs.append(first_seq + i)
                    else:
                        session.tool_output_tokens += tokens
                    running += tokens
                    continue
            if over:
                tokens = _refuse(session, p)
                effects.failed_seqs.append(first_seq + i)
            elif row["view_state"] in TRIMMABLE_STATES:
                session.tool_output_tokens += tokens
        running += tokens
    session.conversation_tokens = base
    return effects


def _refuse(session: Session, p: PreparedMessage) -> int:
    """docs/concepts/guard.md#tool-preflight: the failure view (the output stays stored)."""
    row = p.row
    info = p.info or OutputInfo(ref=row["output_ref"], byte_size=0, line_count=0)
    view = failed_view(info)
    tokens = _placeholder_tokens(view, row["tool_call_id"], row["name"], session)
    row.update(view=view, view_state="failed", token_count=tokens, content="", parts=None)
    session.tool_budget_exceeded = True
    return tokens


def _refuse_what_cannot_fit(
    session: Session,
    prepared: Sequence[PreparedMessage],
    batch: list[tuple[int, PreparedMessage]],
    first_seq: int,
    effects: ToolEffects,
    sticky: bool,
) -> tuple[set[int], set[int]]:
    """Indices of the batch's outputs refused before the trim (``engine.output_trim.admit_outputs``),
    and those of them the preflight cuts instead (compaction available).

    The room is the preferred target's, before the batch; the batch's other
    messages take theirs first. Without compaction a refused output gets the
    failure view now; with it, it is cut like any output that would overflow.
    """
    state = accounting.compute_budget(session)
    others = sum(p.row["token_count"] for p in prepared if p.message.role != "tool")
    room = state.guard.limit - state.guard.projected - others
    admitted = admit_outputs(
        (p.row["token_count"] for _, p in batch),
        room=room,
        reclaimable=session.tool_output_tokens,
        sticky=sticky,
    )
    refused: set[int] = set()
    overflowing: set[int] = set()
    compaction = None
    for (i, p), ok in zip(batch, admitted, strict=True):
        if ok:
            continue
        refused.add(i)
        if compaction is None:
            compaction = _compaction_can_help(session)
        if compaction:
            overflowing.add(i)
        else:
            _refuse(session, p)
            effects.failed_seqs.append(first_seq + i)
    return refused, overflowing
