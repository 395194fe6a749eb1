"""Writes for compaction: request a run, execute it, apply it, restore snapshots.

The shape follows the append path (healthchecks' ``ping``): the slow part —
loading the window and calling the summariser — runs with no lock held, on a
copy of the window up to seq S; the result is applied in one short transaction
under the session row lock, and only if the window it was computed from is
still the live one (else it is recomputed). Appends that arrive meanwhile have
seqs > S: they stay live after the new summary. A failure anywhere before the
apply leaves the session row exactly as it was (spec 004 CX-NT3).

Concurrency:

- At most one queued/running compaction per session (a partial unique index
  backs the check made under the session lock); a second request joins it.
  The emergency path (``overflow``) never waits behind one.
- A run is *claimed* under its row lock; each claim bumps ``attempts`` and only
  the latest attempt may apply or fail it. Its holder renews a short lease
  while it works (``leases.Heartbeat``); a run whose lease lapsed (a killed
  worker) is requeued or failed by whoever looks at it next
  (``compaction_recover``), and a redelivered message with its own task id
  takes it over.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, IntegrityError, connection, connections, transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from contextsvc.engine.budget import usage_note
from contextsvc.engine.build import message_to_dict
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.guard import STATUS_RANK
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.messages import ToolDef
from contextsvc.engine.retention import WindowText, check_retention, extract_key_facts
from contextsvc.engine.strategies.base import (
    CompactionConfig,
    ContextState,
    StrategyContext,
    TokenCounter,
    Window,
)
from contextsvc.engine.strategies.chain import DEFAULT_CHAIN, ChainResult, run_chain, validate_chain
from contextsvc.engine.summarize import Summarizer, SummarizerError, preamble
from contextsvc.errors import Conflict, ServiceError, Unavailable, ValidationFailed
from sessions import accounting, hotpath
from sessions.models import Message, Session

from . import leases, selectors, summarizers
from .conf import setting_bool, setting_number, setting_str
from .models import CompactionRun, CompactionState, Snapshot, ViewChange

logger = logging.getLogger("contextsvc.compaction")

Trigger = CompactionRun.Trigger
Status = CompactionRun.Status

# After a compaction the context is at most this share of the effective window
# (hysteresis: compacting to just under the trigger would trigger again on the
# next message). Lowered below the trigger when a policy triggers earlier.
DEFAULT_TARGET_RATIO = 0.7
# A queued run nobody claimed for this long is enqueued again (lost message,
# broker down at enqueue time).
STALE_QUEUED = timedelta(seconds=120)
# No new auto run right after one that could not shrink the window, until a few
# more messages have arrived.
AUTO_COOLDOWN_MESSAGES = 4
MAX_APPLY_ATTEMPTS = 3
# What the summary prompt and its answer need besides the messages.
SUMMARY_PROMPT_MARGIN = 2_000
MAX_INSTRUCTIONS = 20_000


def wait_seconds() -> float:
    return setting_number("CONTEXTSVC_COMPACT_WAIT_SECONDS", 120)


class RetryableCompactionError(Exception):
    """A transient failure: the run is queued again and the task retries later."""


class _WindowChanged(Exception):
    """The live window moved (another compaction, a restore) since the run loaded it."""


def compaction_policy(session: Session) -> dict[str, Any]:
    return dict((session.policy or {}).get("compaction") or {})


def resolve_chain(session: Session, strategy: str | None) -> tuple[str, ...]:
    """The strategies a run executes: the request's, else the policy's chain or
    strategy, else DESIGN.md's default chain."""
    policy = compaction_policy(session)
    if strategy in (None, "", "chain"):
        if policy.get("chain"):
            return validate_chain(policy["chain"])
        if policy.get("strategy") and policy["strategy"] != "chain":
            return validate_chain([policy["strategy"]])
        return DEFAULT_CHAIN
    return validate_chain([strategy])


def _trigger_ratio(
    session: Session, state: accounting.BudgetState, chain: tuple[str, ...]
) -> float:
    policy = compaction_policy(session)
    if policy.get("threshold_ratio"):
        # spec 000 §2.2 thresholdRatio (0.8 there): kept as configuration.
        return float(policy["threshold_ratio"])
    if chain == ("sandwich",):
        # spec 004: the sandwich compresses at 70 %.
        return float(policy.get("sandwich_threshold", 0.7))
    return state.budget.thresholds.compact_ratio


def target_tokens(session: Session, state: accounting.BudgetState, chain: tuple[str, ...]) -> int:
    """Window tokens (retain + summary + live messages) the chain stops at.

    The context target is ``target_ratio`` of the effective window; what is not
    the window (system, skills, tool descriptions, reservations, and the
    provider's calibration when it counts more than we do) comes off it.
    """
    policy = compaction_policy(session)
    ratio = float(policy.get("target_ratio") or DEFAULT_TARGET_RATIO)
    trigger = _trigger_ratio(session, state, chain)
    if ratio >= trigger:
        ratio = trigger * 0.8
    budget = state.budget
    fixed = budget.system_prompt + budget.skill_prompts + budget.tool_descriptions + state.reserved
    calibration = max(0, (state.calibrated or state.estimated) - state.estimated)
    return max(0, math.floor(ratio * budget.effective_window) - fixed - calibration)


def should_auto_compact(
    session: Session, state: accounting.BudgetState, chain: tuple[str, ...]
) -> bool:
    """Is an automatic compaction due (spec 002 §3 compact tier, or spec 000's ratio)?"""
    policy = compaction_policy(session)
    if not policy.get("enabled", True) or not policy.get("auto", True):
        return False  # spec 000 §2.5: enabled=false / auto=false → no automatic compaction
    if session.status != Session.Status.ACTIVE:
        return False
    if STATUS_RANK[state.guard.status] >= STATUS_RANK["compact"]:
        return True
    if policy.get("threshold_ratio") or chain == ("sandwich",):
        ratio = _trigger_ratio(session, state, chain)
        return state.guard.projected >= math.floor(ratio * state.budget.effective_window)
    return False


# --- hooks registered by the app ------------------------------------------------------------


def on_session_activity(session: Session, state: accounting.BudgetState, last_role: str) -> None:
    """``REGISTRY.after_append``: spec 000 §2.8's check points.

    Runs after the append/usage transaction committed: after an assistant
    message (an LLM call ended), after tool results, and on reported usage.
    Never raises: the append already succeeded.
    """
    if last_role not in ("assistant", "tool", "usage", "tool_overflow"):
        return
    if not setting_bool("CONTEXTSVC_AUTO_COMPACT", True):
        return
    try:
        chain = resolve_chain(session, None)
        # A tool output that could not fit (shown trimmed) makes compaction due
        # at once, whatever the tier (sessions.outputs.budget preflight).
        if last_role == "tool_overflow" or should_auto_compact(session, state, chain):
            compaction_auto_request(session=session)
    except Exception:  # noqa: BLE001 - the append must not fail because of this
        logger.exception("auto-compaction trigger failed for session %s", session.pk)


def can_make_room(session: Session) -> bool:
    """``REGISTRY.compaction_available``: may an automatic
    compaction still run for this session?"""
    policy = compaction_policy(session)
    if not policy.get("enabled", True) or not policy.get("auto", True):
        return False
    if session.status != Session.Status.ACTIVE or not setting_bool("CONTEXTSVC_AUTO_COMPACT", True):
        return False
    return not selectors.breaker_open(selectors.state_of(session))


def compact_before_call(session: Session, state: accounting.BudgetState) -> bool:
    """``REGISTRY.context_preflight``: at block or final, compact
    now, in the request, while compaction can make room (spec 002 §8 step 3).
    Joins (and runs) an automatic run already queued. Answers within
    ``CONTEXTSVC_CONTEXT_WAIT_SECONDS`` whatever the run does (a slow summary
    goes on in the background), and at once for a run that stopped beating.
    True when the window changed; a failed or unfinished run leaves the
    session as it was and the guard decides."""
    if not can_make_room(session):
        return False
    try:
        run, _ = compaction_request(session=session, trigger=Trigger.AUTO, enqueue=False)
        run = _run_bounded(run, leases.context_wait_seconds())
    except Exception:  # noqa: BLE001 - the context must still be answered
        logger.exception("compaction before the call failed for session %s", session.pk)
        return False
    return run.status == Status.SUCCEEDED and bool(run.changed)


def context_note(session: Session, state: accounting.BudgetState) -> str | None:
    """spec 002 §7: the non-cacheable note above 80 % usage."""
    return usage_note(state.budget.used, state.budget.effective_window)


# --- requesting runs -----------------------------------------------------------------------


def compaction_auto_request(*, session: Session) -> CompactionRun | None:
    """An automatic run, unless the circuit breaker is open or one is under way."""
    if selectors.breaker_open(selectors.state_of(session)):
        return None
    active = (
        CompactionRun.objects.filter(session=session, status__in=CompactionRun.ACTIVE)
        .exclude(trigger=Trigger.EMERGENCY)
        .first()
    )
    if active is not None:
        compaction_recover(active)
        if active.is_active:
            return active
    last = (
        CompactionRun.objects.filter(session=session, trigger=Trigger.AUTO)
        .order_by("-created_at")
        .first()
    )
    if (
        last is not None
        and last.status == Status.SUCCEEDED
        and not last.changed
        and last.through_seq is not None
        and session.last_seq - last.through_seq < AUTO_COOLDOWN_MESSAGES
    ):
        return None
    run, _ = compaction_request(session=session, trigger=Trigger.AUTO)
    return run


def compaction_request(
    *,
    session: Session,
    trigger: str,
    strategy: str | None = None,
    instructions: str = "",
    retain_last_turns: int | None = None,
    enqueue: bool = True,
) -> tuple[CompactionRun, bool]:
    """Create a queued run, or join the one under way: ``(run, created)``.

    ``enqueue``: send it to a worker once this transaction commits (never
    before: the worker must find the row).
    """
    if trigger not in Trigger.values:
        raise ValueError(f"unknown trigger {trigger!r}")
    chain = resolve_chain(session, strategy)
    if retain_last_turns is not None and (
        isinstance(retain_last_turns, bool)
        or not isinstance(retain_last_turns, int)
        or retain_last_turns < 0
    ):
        raise ValidationFailed(
            "retain_last_turns must be a non-negative integer",
            details={"field": "retain_last_turns"},
        )
    instructions = instructions or ""
    if len(instructions) > MAX_INSTRUCTIONS:
        raise ValidationFailed(
            f"instructions must be at most {MAX_INSTRUCTIONS} characters",
            details={"field": "instructions"},
        )
    if trigger != Trigger.EMERGENCY:
        # Never join a dead run: requeue (or fail) one whose lease lapsed first.
        # Done before the session lock: recovering locks the run row, and the
        # apply locks run then session, so the other order could deadlock.
        for stale in CompactionRun.objects.filter(
            session=session, status__in=CompactionRun.ACTIVE, lease_expires_at__lte=timezone.now()
        ).exclude(trigger=Trigger.EMERGENCY):
            compaction_recover(stale)
    with transaction.atomic():
        locked = hotpath.lock_session(session.pk)
        if locked.live_message_count == 0 and not locked.retain and not locked.summary:
            # spec 004 validation rules / CX-NT2.
            raise ValidationFailed("Conversation has no messages", details={"field": "messages"})
        if trigger != Trigger.EMERGENCY:
            active = (
                CompactionRun.objects.filter(session=locked, status__in=CompactionRun.ACTIVE)
                .exclude(trigger=Trigger.EMERGENCY)
                .first()
            )
            if active is not None:
                return active, False
        task_id = str(uuid.uuid4()) if enqueue else ""
        try:
            with transaction.atomic():
                run = CompactionRun.objects.create(
                    session=locked,
                    trigger=trigger,
                    strategy=strategy or "chain",
                    chain=list(chain),
                    forced=trigger != Trigger.AUTO,
                    instructions=instructions,
                    retain_last_turns=retain_last_turns,
                    celery_task_id=task_id,
                    lease_expires_at=timezone.now() + STALE_QUEUED,
                )
        except IntegrityError:
            # The partial unique index: another request won (only possible
            # without the row lock, e.g. a driver that ignores FOR UPDATE).
            active = CompactionRun.objects.filter(
                session=locked, status__in=CompactionRun.ACTIVE
            ).first()
            if active is None:
                raise
            return active, False
        if enqueue:
            run_id = run.pk
            transaction.on_commit(lambda: enqueue_run(run_id, task_id))
    return run, True


def enqueue_run(run_id: Any, task_id: str | None = None) -> None:
    """Send a run to the workers; on failure it stays queued and is re-sent later."""
    from .tasks import run_compaction

    options: dict[str, Any] = {}
    queue = setting_str("CONTEXTSVC_COMPACTION_QUEUE")
    if queue:
        # A dedicated worker pool (``celery worker -Q <queue>``) for compaction.
        options["queue"] = queue
    try:
        run_compaction.apply_async(
            args=[str(run_id)], task_id=task_id or str(uuid.uuid4()), **options
        )
    except Exception:  # noqa: BLE001 - a broker outage must not fail the request
        logger.exception("could not enqueue compaction run %s; it stays queued", run_id)


def compaction_recover(run: CompactionRun) -> bool:
    """Requeue, or fail, a run whose lease lapsed: its queue message was lost or
    its executor died. False (and nothing written) for a live or finished run.

    Called by whoever looks at a run — the append hook, ``POST /compact``,
    ``GET /context``, ``GET /compactions/{id}``, a worker's sweep, beat — so a
    dead run is recovered without beat. ``run`` is refreshed when it changed.
    """
    if not leases.lapsed(run):
        return False
    with transaction.atomic():
        locked = CompactionRun.objects.select_for_update().filter(pk=run.pk).first()
        now = timezone.now()
        if locked is None or not leases.lapsed(locked, now):
            return False  # renewed, claimed or finished meanwhile
        if leases.exhausted(locked):
            ran = (now - locked.started_at).total_seconds() if locked.started_at else 0.0
            _fail(
                locked,
                locked.attempts,
                "SERVICE_UNAVAILABLE",
                f"The compaction's worker was lost {locked.attempts} time(s); "
                "the session is unchanged",
                time.perf_counter() - ran,
            )
        else:
            # A new task id: should the broker redeliver the old message later,
            # it finds the run held under another id and leaves it alone.
            task_id = str(uuid.uuid4())
            CompactionRun.objects.filter(pk=locked.pk).update(
                status=Status.QUEUED, celery_task_id=task_id, lease_expires_at=now + STALE_QUEUED
            )
            transaction.on_commit(lambda: enqueue_run(locked.pk, task_id))
            logger.warning(
                "compaction run %s: lease lapsed (status %s, attempt %s), requeued",
                locked.pk,
                locked.status,
                locked.attempts,
            )
    run.refresh_from_db()
    return True


def compaction_requeue_stale() -> int:
    """Requeue or fail every run whose lease lapsed (beat's ``tasks.requeue_stale``
    and every worker's own sweep)."""
    stale = CompactionRun.objects.filter(
        status__in=CompactionRun.ACTIVE, lease_expires_at__lte=timezone.now()
    )
    return sum(compaction_recover(run) for run in stale)


# --- executing runs ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Plan:
    through_seq: int
    base: tuple[int, str, str]
    window: Window
    result: ChainResult
    counter: TokenCounter
    target: int
    model: str
    summarizer: summarizers.TimedSummarizer
    retention: dict[str, Any] | None
    retention_score: float | None
    load_ms: float
    compute_ms: float


def _claim(run_id: Any, task_id: str | None) -> tuple[CompactionRun, int] | None:
    with transaction.atomic():
        # No select_related here: FOR UPDATE would lock the session row too.
        run = CompactionRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.is_finished:
            return None
        now = timezone.now()
        if run.status == Status.RUNNING:
            # The same message again (the worker died: acks_late +
            # reject_on_worker_lost), or a lease run out: the executor is gone.
            redelivered = bool(task_id) and run.celery_task_id == task_id
            expired = run.lease_expires_at is not None and run.lease_expires_at <= now
            if not (redelivered or expired):
                return None
            if leases.exhausted(run):
                # Lost that many times (a run that kills its worker): stop here.
                _fail(
                    run,
                    run.attempts,
                    "SERVICE_UNAVAILABLE",
                    f"The compaction's worker was lost {run.attempts} time(s); "
                    "the session is unchanged",
                    time.perf_counter(),
                )
                return None
        run.status = Status.RUNNING
        run.attempts += 1
        run.started_at = run.started_at or now
        # Short: the heartbeat renews it while the run works.
        run.lease_expires_at = leases.lease_deadline(now)
        if task_id:
            run.celery_task_id = task_id
        run.save(
            update_fields=["status", "attempts", "started_at", "lease_expires_at", "celery_task_id"]
        )
        return run, run.attempts


def compaction_execute(
    *,
    run_id: Any,
    task_id: str | None = None,
    can_retry: bool = False,
    summarizer: Summarizer | None = None,
) -> CompactionRun | None:
    """Run a queued run to its end. Safe to call twice: a finished run, or one
    another executor holds, is returned as it is."""
    claim = _claim(run_id, task_id)
    if claim is None:
        return CompactionRun.objects.filter(pk=run_id).first()
    run, attempt = claim
    with leases.Heartbeat(run.pk, attempt):
        return _execute_claimed(run, attempt, can_retry=can_retry, summarizer=summarizer)


def _execute_claimed(
    run: CompactionRun, attempt: int, *, can_retry: bool, summarizer: Summarizer | None
) -> CompactionRun:
    started = time.perf_counter()
    cpu_started = time.thread_time()
    try:
        for _ in range(MAX_APPLY_ATTEMPTS):
            plan = _compute(run, summarizer)
            try:
                return _apply(run, attempt, plan, started, cpu_started)
            except _WindowChanged:
                logger.info("compaction run %s: the window moved, recomputing", run.pk)
        return _fail(
            run, attempt, "CONFLICT", "The live window kept changing during the compaction", started
        )
    except SummarizerError as exc:
        if exc.transient and can_retry:
            _release(run, attempt, "SERVICE_UNAVAILABLE", str(exc))
            raise RetryableCompactionError(str(exc)) from exc
        return _fail(run, attempt, "SERVICE_UNAVAILABLE", str(exc), started)
    except EngineValidationError as exc:
        return _fail(run, attempt, "VALIDATION_ERROR", exc.message, started)
    except ServiceError as exc:
        return _fail(run, attempt, exc.code, exc.message, started)
    except DatabaseError as exc:
        if can_retry:
            _release(run, attempt, "SERVICE_UNAVAILABLE", f"database: {exc}")
            raise RetryableCompactionError(str(exc)) from exc
        _fail(run, attempt, "SERVICE_UNAVAILABLE", f"database: {exc}", started)
        raise
    except Exception as exc:
        _fail(run, attempt, "INTERNAL_ERROR", f"{type(exc).__name__}: {exc}", started)
        raise


def compaction_plan(
    *,
    session: Session,
    strategy: str | None,
    instructions: str = "",
    retain_last_turns: int | None = None,
    summarizer: Summarizer | None = None,
) -> _Plan:
    """What a manual compaction would do now, computed without writing anything:
    the same window, chain, target and strategies as a real run (the
    dashboard's preview). ``summarizer`` defaults to the offline one, so no LLM
    is called."""
    from contextsvc.engine.offline_summarizer import OfflineSummarizer

    draft = CompactionRun(
        session=session,
        trigger=Trigger.MANUAL,
        strategy=strategy or "chain",
        chain=list(resolve_chain(session, strategy)),
        forced=True,
        instructions=instructions,
        retain_last_turns=retain_last_turns,
    )
    return _compute(draft, summarizer or OfflineSummarizer())


def _compute(run: CompactionRun, summarizer: Summarizer | None) -> _Plan:
    t0 = time.perf_counter()
    session = Session.objects.get(pk=run.session_id)
    through = session.last_seq
    base = (session.window_start_seq, session.retain, session.summary)
    messages = selectors.window_messages(
        session, start_seq=session.window_start_seq, through_seq=through
    )
    if not messages and not session.retain and not session.summary:
        raise EngineValidationError("Conversation has no messages", field="messages")
    window = Window(messages=messages, retain=session.retain, summary=session.summary)
    state = accounting.compute_budget(session)
    policy = compaction_policy(session)
    chain = tuple(run.chain) or DEFAULT_CHAIN
    effective = state.budget.effective_window
    summary_max = int(policy.get("summary_max_tokens", 4096))
    config = CompactionConfig.from_policy(
        policy,
        model=session.model,
        instructions=run.instructions,
        retain_last_turns=run.retain_last_turns,
        summary_input_tokens=max(1_000, effective - summary_max - SUMMARY_PROMPT_MARGIN),
    )
    timed = summarizers.TimedSummarizer(
        summarizer or summarizers.for_session(model=config.model, provider=session.provider)
    )
    counter = TokenCounter(accounting.tokenizer_of(session), accounting.estimate_config_of(session))
    target = target_tokens(session, state, chain)
    fixed = state.budget.system_prompt + state.budget.skill_prompts + state.budget.tool_descriptions
    cached = selectors.state_of(session)
    sandwich_state = None
    if cached is not None and cached.range_start is not None and cached.range_end is not None:
        sandwich_state = ContextState(
            strategy=cached.strategy,
            summary=cached.summary,
            summary_range=(cached.range_start, cached.range_end),
        )
    ctx = StrategyContext(
        counter=counter,
        config=config,
        summarizer=timed,
        target_tokens=target,
        force=run.forced,
        reason="overflow" if run.trigger == Trigger.EMERGENCY else "budget",
        max_context_tokens=max(1, effective - fixed),
        sandwich_state=sandwich_state,
        transcript=(
            (lambda: selectors.transcript_messages(session, through_seq=through))
            if "sandwich" in chain
            else None
        ),
    )
    load_ms = (time.perf_counter() - t0) * 1000
    result = run_chain(window, chain, ctx)
    retention: dict[str, Any] | None = None
    score: float | None = None
    if result.changed:
        report = _retention(window, result.window)
        retention, score = report.to_dict(), report.score
    return _Plan(
        through_seq=through,
        base=base,
        window=window,
        result=result,
        counter=counter,
        target=target,
        model=config.model if timed.calls else "",
        summarizer=timed,
        retention=retention,
        retention_score=score,
        load_ms=load_ms,
        compute_ms=(time.perf_counter() - t0) * 1000 - load_ms,
    )


def _view_key(msg: EngineMessage) -> tuple[Any, ...]:
    return (msg.view, msg.view_state, msg.token_count)


def _retention(before: Window, after: Window) -> Any:
    """Key facts of what the compaction removed or rewrote, checked against the new window."""
    kept = {m.seq: m for m in after.messages if m.seq is not None}
    compacted: list[EngineMessage] = []
    if (before.retain, before.summary) != (after.retain, after.summary):
        compacted.extend(before.preamble())
    for msg in before.messages:
        new = kept.get(msg.seq)
        if new is None or _view_key(new) != _view_key(msg):
            compacted.append(msg)
    facts = extract_key_facts(compacted)
    return check_retention(facts, WindowText.of(after.retain, after.summary, after.messages))


def _snapshot_message(msg: EngineMessage) -> dict[str, Any]:
    out = message_to_dict(msg)
    # Whether ``content`` is a view (so a restore can put the view back as one).
    out["has_view"] = msg.view is not None
    return out


def _recount_tool_outputs(session: Session) -> list[str]:
    """Issue 3's cached tool-output counters, after views changed in place."""
    try:
        from sessions.outputs.budget import session_recount_tool_outputs
    except ImportError:  # the tool output cache is not installed
        return []
    session_recount_tool_outputs(session)
    return ["tool_output_tokens", "tool_trim_seq", "tool_count_window_seq"]


def _set_views(
    session: Session, desired: dict[int, tuple[str | None, str, int]]
) -> list[ViewChange]:
    """Give messages the views in ``desired`` (seq → view, state, tokens); log the old ones."""
    if not desired:
        return []
    rows = list(
        Message.objects.filter(session=session, seq__in=list(desired)).only(
            "id", "seq", "view", "view_state", "token_count"
        )
    )
    changes: list[ViewChange] = []
    changed_rows = []
    for row in rows:
        view, state, tokens = desired[row.seq]
        if (row.view, row.view_state, row.token_count) == (view, state, tokens):
            continue
        changes.append(
            ViewChange(
                session=session,
                seq=row.seq,
                old_view=row.view,
                old_state=row.view_state,
                old_tokens=row.token_count,
                new_view=view,
                new_state=state,
                new_tokens=tokens,
            )
        )
        row.view, row.view_state, row.token_count = view, state, tokens
        changed_rows.append(row)
    if changed_rows:
        # One statement run for many parameter sets: bulk_update's CASE WHEN per
        # row costs ~0.3 ms of query building each in Python.
        quote = connection.ops.quote_name
        sql = (
            f"UPDATE {quote(Message._meta.db_table)} SET {quote('view')} = %s,"
            f" {quote('view_state')} = %s, {quote('token_count')} = %s WHERE {quote('id')} = %s"
        )
        with connection.cursor() as cursor:
            cursor.executemany(
                sql, [(r.view, r.view_state, r.token_count, r.pk) for r in changed_rows]
            )
    return changes


def _set_window(
    session: Session, *, retain: str, summary: str, start_seq: int, counter: TokenCounter
) -> accounting.BudgetState:
    """Move the live window and recount its cached counters (caller holds the lock and saves)."""
    session.retain = retain
    session.summary = summary
    session.summary_tokens = counter.messages(preamble(retain, summary))
    session.window_start_seq = start_seq
    agg = Message.objects.filter(session=session, seq__gte=start_seq).aggregate(
        tokens=Sum("token_count"), n=Count("id")
    )
    session.conversation_tokens = agg["tokens"] or 0
    session.live_message_count = agg["n"] or 0
    state = accounting.compute_budget(session)
    session.guard_status = state.guard.status
    session.used_tokens = state.budget.used
    session.updated_at = timezone.now()
    return state


_WINDOW_FIELDS = [
    "retain",
    "summary",
    "summary_tokens",
    "window_start_seq",
    "conversation_tokens",
    "live_message_count",
    "guard_status",
    "used_tokens",
    "updated_at",
    "open_tool_calls",
]


def _apply(
    run: CompactionRun, attempt: int, plan: _Plan, started: float, cpu_started: float | None = None
) -> CompactionRun:
    t0 = time.perf_counter()
    result = plan.result
    with transaction.atomic():
        run = CompactionRun.objects.select_for_update().get(pk=run.pk)
        if run.attempts != attempt or run.status != Status.RUNNING:
            logger.info("compaction run %s: attempt %s superseded, not applying", run.pk, attempt)
            return run
        session = hotpath.lock_session(run.session_id)
        if (session.window_start_seq, session.retain, session.summary) != plan.base:
            raise _WindowChanged
        before_used = accounting.compute_budget(session).budget.used
        shrinks = result.changed and result.result.after_tokens < result.result.before_tokens
        snapshot = None
        after_used = before_used
        if shrinks:
            new = result.window
            original = {m.seq: m for m in plan.window.messages}
            kept = new.messages
            start = kept[0].seq if kept else plan.through_seq + 1
            desired = {
                m.seq: (m.view, m.view_state, m.token_count)
                for m in kept
                if m.seq in original and _view_key(m) != _view_key(original[m.seq])
            }
            changes = _set_views(session, desired)
            # Calls whose message left the window: a late result for them
            # would have no call before it in any context, so it is refused.
            gone = {c.id for m in plan.window.messages if m.seq < start for c in m.tool_calls}
            if gone and session.open_tool_calls:
                session.open_tool_calls = {
                    k: v for k, v in session.open_tool_calls.items() if k not in gone
                }
            state = _set_window(
                session,
                retain=new.retain,
                summary=new.summary,
                start_seq=start,
                counter=plan.counter,
            )
            extra = _recount_tool_outputs(session)
            session.save(update_fields=[*_WINDOW_FIELDS, *extra])
            after_used = state.budget.used
            # spec 002 §6 dual write: the transcript is untouched, the snapshot
            # holds the compacted window for resume.
            snapshot = Snapshot.objects.create(
                session=session,
                run=run,
                kind=Snapshot.Kind.COMPACTION,
                retain=new.retain,
                summary=new.summary,
                window_start_seq=start,
                through_seq=plan.through_seq,
                token_count=result.result.after_tokens,
                message_count=result.result.after_msg_count,
                messages=[_snapshot_message(m) for m in kept],
            )
            for change in changes:
                change.snapshot = snapshot
            ViewChange.objects.bulk_create(changes, batch_size=500)
        cstate, _ = CompactionState.objects.get_or_create(session=session)
        if shrinks and result.state_changed:
            sandwich = result.sandwich_state
            cstate.strategy = sandwich.strategy if sandwich else ""
            cstate.summary = sandwich.summary if sandwich else ""
            cstate.range_start = sandwich.summary_range[0] if sandwich else None
            cstate.range_end = sandwich.summary_range[1] if sandwich else None
            cstate.compressed_at = timezone.now() if sandwich else None
        cstate.consecutive_failures = 0
        cstate.breaker_opened_at = None
        cstate.save()

        r = result.result
        now = timezone.now()
        run.status = Status.SUCCEEDED
        run.changed = shrinks
        run.strategies_run = r.strategies_run if shrinks else []
        run.reports = [rep.to_dict() for rep in result.reports]
        run.before_tokens = r.before_tokens
        run.after_tokens = r.after_tokens if shrinks else r.before_tokens
        run.before_msg_count = r.before_msg_count
        run.after_msg_count = r.after_msg_count if shrinks else r.before_msg_count
        run.before_used = before_used
        run.after_used = after_used
        run.target_tokens = plan.target
        run.through_seq = plan.through_seq
        run.base_window_start_seq = plan.base[0]
        run.model = plan.model
        run.summarizer = plan.summarizer.name if plan.summarizer.calls else ""
        run.retention = plan.retention if shrinks else None
        run.retention_score = plan.retention_score if shrinks else None
        run.error_code = ""
        run.error = ""
        run.finished_at = now
        run.lease_expires_at = None
        total = (time.perf_counter() - started) * 1000
        run.timings = {
            "queue_ms": _ms(run.started_at - run.created_at) if run.started_at else None,
            "load_ms": round(plan.load_ms, 2),
            "compute_ms": round(plan.compute_ms, 2),
            "llm_ms": round(plan.summarizer.llm_ms, 2),
            "llm_calls": plan.summarizer.calls,
            "apply_ms": round((time.perf_counter() - t0) * 1000, 2),
            "total_ms": round(total, 2),
            # The service's own time around the model call.
            "overhead_ms": round(total - plan.summarizer.llm_ms, 2),
        }
        if cpu_started is not None:
            # This thread's CPU time (DB and model waits excluded): what the
            # run costs on a machine that is not otherwise busy.
            run.timings["cpu_ms"] = round((time.thread_time() - cpu_started) * 1000, 2)
        run.save()
    return run


def _ms(delta: timedelta) -> float:
    return round(delta.total_seconds() * 1000, 2)


def _release(run: CompactionRun, attempt: int, code: str, message: str) -> None:
    """Back to queued (a transient failure the task retries); the session is untouched."""
    with transaction.atomic():
        CompactionRun.objects.filter(pk=run.pk, attempts=attempt, status=Status.RUNNING).update(
            status=Status.QUEUED,
            error_code=code,
            error=message[:2000],
            lease_expires_at=timezone.now() + STALE_QUEUED + timedelta(minutes=5),
        )


def _fail(
    run: CompactionRun, attempt: int, code: str, message: str, started: float
) -> CompactionRun:
    """Mark the run failed. The session row is not touched (spec 004 CX-NT3);
    a failed auto run counts toward the circuit breaker."""
    try:
        with transaction.atomic():
            run = CompactionRun.objects.select_for_update().get(pk=run.pk)
            if run.attempts != attempt or run.status != Status.RUNNING:
                # Superseded, finished, or requeued after its lease lapsed: a
                # holder that outlived its lease must not fail the requeued run.
                return run
            run.status = Status.FAILED
            run.error_code = code
            run.error = message[:2000]
            run.finished_at = timezone.now()
            run.lease_expires_at = None
            run.timings = {
                **(run.timings or {}),
                "total_ms": round((time.perf_counter() - started) * 1000, 2),
            }
            run.save()
            if run.trigger == Trigger.AUTO:
                cstate, _ = CompactionState.objects.get_or_create(session_id=run.session_id)
                CompactionState.objects.filter(pk=cstate.pk).update(
                    consecutive_failures=F("consecutive_failures") + 1
                )
                cstate.refresh_from_db()
                if (
                    cstate.consecutive_failures >= selectors.BREAKER_THRESHOLD
                    and not cstate.breaker_opened_at
                ):
                    cstate.breaker_opened_at = timezone.now()
                    cstate.save(update_fields=["breaker_opened_at"])
                    logger.warning(
                        "compaction circuit breaker open for session %s after %s failed auto runs",
                        run.session_id,
                        cstate.consecutive_failures,
                    )
    except DatabaseError:
        logger.exception("could not mark compaction run %s failed", run.pk)
    logger.warning("compaction run %s failed: %s %s", run.pk, code, message)
    return run


# --- synchronous entry points ------------------------------------------------------------------


def compaction_run_sync(
    *, run: CompactionRun, summarizer: Summarizer | None = None, timeout: float | None = None
) -> CompactionRun:
    """Run ``run`` in this process, or wait for the executor that has it.

    ``wait: true``, ``GET /context`` at block, the ``compact_context`` tool and
    the overflow path. The sync claim uses its own task id, so the queue message
    of a joined run finds it taken (and returns) instead of taking it over.
    Waits at most ``timeout`` (default ``CONTEXTSVC_COMPACT_WAIT_SECONDS``), and
    never on a dead run: one whose lease lapsed is requeued and run here (or
    failed after too many attempts); one whose holder stopped beating is
    answered as it is.
    """
    deadline = time.monotonic() + (wait_seconds() if timeout is None else timeout)
    run_here = run.status == Status.QUEUED
    while True:
        if run_here:
            done = compaction_execute(
                run_id=run.pk, task_id=f"sync-{uuid.uuid4()}", summarizer=summarizer
            )
            if done is not None and done.is_finished:
                return done
            run_here = False
        run.refresh_from_db()
        if run.is_finished or time.monotonic() >= deadline:
            return run
        if compaction_recover(run):
            run_here = run.status == Status.QUEUED
            continue
        if leases.stalled(run):
            return run
        time.sleep(0.1)


def _run_bounded(run: CompactionRun, timeout: float) -> CompactionRun:
    """``compaction_run_sync``, but the caller gets an answer within ``timeout``.

    A queued run is executed in a thread of its own (with its own connection
    and heartbeat) that goes on after the timeout; the caller answers with the
    run as it is. Inside a transaction the thread could not see the run's
    rows, so there it runs inline as before.
    """
    if run.status != Status.QUEUED or connection.in_atomic_block:
        return compaction_run_sync(run=run, timeout=timeout)
    deadline = time.monotonic() + timeout
    executor = threading.Thread(
        target=_execute_detached, args=(run.pk,), name=f"compaction-{run.pk}", daemon=True
    )
    executor.start()
    executor.join(timeout)
    run.refresh_from_db()
    if executor.is_alive() or run.is_finished:
        return run
    # The thread found the run taken (a worker claimed it first): wait on that holder.
    return compaction_run_sync(run=run, timeout=max(0.0, deadline - time.monotonic()))


def _execute_detached(run_id: Any) -> None:
    try:
        compaction_execute(run_id=run_id, task_id=f"sync-{uuid.uuid4()}")
    except Exception:  # noqa: BLE001 - nobody is left to raise to; the run is marked failed
        logger.exception("compaction run %s failed in the background", run_id)
    finally:
        connections.close_all()


def raise_for_failure(run: CompactionRun) -> None:
    """A failed run as the API error it stands for (503 for a summariser failure)."""
    if run.status != Status.FAILED:
        return
    details = {"run_id": str(run.pk)}
    if run.error_code == "VALIDATION_ERROR":
        raise ValidationFailed(run.error, details=details)
    if run.error_code == "CONFLICT":
        raise Conflict(run.error, details=details)
    raise Unavailable(f"Compaction failed: {run.error}", details=details)


def compaction_overflow(
    *,
    session: Session,
    summarizer: Summarizer | None = None,
    detail: str = "",
    reported_tokens: int | None = None,
) -> CompactionRun:
    """spec 003 reactive path: the provider said the context is too long. Drop the
    oldest turns now, whatever else is running."""
    logger.warning(
        "context overflow reported for session %s (provider counted %s tokens, we estimate %s): %s",
        session.pk,
        reported_tokens,
        session.used_tokens,
        detail[:500],
    )
    run, _ = compaction_request(
        session=session, trigger=Trigger.EMERGENCY, strategy="drop_oldest_turns", enqueue=False
    )
    return compaction_run_sync(run=run, summarizer=summarizer)


COMPACT_CONTEXT_TOOL = ToolDef(
    name="compact_context",
    description=(
        "Compact this conversation's context now to free space: old tool outputs are cleared "
        "(their refs stay expandable) and earlier turns are replaced by a summary, keeping the "
        "most recent turn intact. Call it before large operations when the context is filling "
        "up. Returns how many tokens were freed."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "instructions": {
                "type": "string",
                "description": "Optional: what the summary must keep (added to its prompt).",
            }
        },
        "additionalProperties": False,
    },
    category="builtin",
)


def describe(run: CompactionRun) -> str:
    if not run.changed:
        return "Nothing to compact: the context could not be made smaller."
    return (
        f"Context compacted: {run.before_tokens:,} → {run.after_tokens:,} tokens "
        f"({run.before_msg_count} → {run.after_msg_count} messages) using "
        f"{', '.join(run.strategies_run)}."
    )


def compact_context_tool(session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
    """spec 002 §7 CompactContextTool: a forced compaction, run now."""
    instructions = arguments.get("instructions", "")
    if not isinstance(instructions, str):
        raise ValidationFailed("instructions must be a string", details={"field": "instructions"})
    unknown = set(arguments) - {"instructions"}
    if unknown:
        raise ValidationFailed(
            f"Unknown argument(s) for compact_context: {', '.join(sorted(unknown))}",
            details={"field": sorted(unknown)[0]},
        )
    run, _ = compaction_request(
        session=session, trigger=Trigger.TOOL, instructions=instructions, enqueue=False
    )
    run = compaction_run_sync(run=run)
    raise_for_failure(run)
    return {
        "result": describe(run) if run.is_finished else "Compaction is still running.",
        "run_id": str(run.pk),
        "status": run.status,
        "compact_result": selectors.compact_result(run),
    }


# --- restore -------------------------------------------------------------------------------


@transaction.atomic
def snapshot_restore(*, session: Session, snapshot_id: int | None) -> Snapshot:
    """Make an earlier snapshot — or, with ``None``, the uncompacted transcript —
    the live window again (issue 4 §8). Nothing is deleted: the restore is
    itself a snapshot, and the views it changes are logged like a compaction's.

    Views: the snapshot's kept messages get the views they had in it; any later
    message a compaction changed since gets back the view it had before that
    compaction first touched it.
    """
    locked = hotpath.lock_session(session.pk)
    target = (
        None
        if snapshot_id is None
        else selectors.snapshot_get(session=locked, snapshot_id=snapshot_id)
    )
    desired: dict[int, tuple[str | None, str, int]] = {}
    changes = ViewChange.objects.filter(session=locked).order_by("seq", "id")
    if target is None:
        retain, summary, start = "", "", 1
    else:
        retain, summary, start = target.retain, target.summary, target.window_start_seq
        for m in target.messages:
            view = m["content"] if m.get("has_view") else None
            desired[m["seq"]] = (view, m.get("view", "full"), m.get("token_count") or 0)
        changes = changes.filter(snapshot_id__gt=target.pk, seq__gt=target.through_seq)
    for change in changes.values_list("seq", "old_view", "old_state", "old_tokens"):
        # The first change after the restore point holds the view before it.
        desired.setdefault(change[0], (change[1], change[2], change[3]))
    view_changes = _set_views(locked, desired)
    counter = TokenCounter(accounting.tokenizer_of(locked), accounting.estimate_config_of(locked))
    _set_window(locked, retain=retain, summary=summary, start_seq=start, counter=counter)
    extra = _recount_tool_outputs(locked)
    locked.save(update_fields=[*_WINDOW_FIELDS, *extra])
    messages = selectors.window_messages(locked, start_seq=start, through_seq=locked.last_seq)
    snapshot = Snapshot.objects.create(
        session=locked,
        kind=Snapshot.Kind.RESTORE,
        restored_from=target,
        uncompacted=target is None,
        retain=retain,
        summary=summary,
        window_start_seq=start,
        through_seq=locked.last_seq,
        token_count=locked.summary_tokens + locked.conversation_tokens,
        message_count=len(preamble(retain, summary)) + len(messages),
        messages=[_snapshot_message(m) for m in messages],
    )
    for change in view_changes:
        change.snapshot = snapshot
    ViewChange.objects.bulk_create(view_changes, batch_size=500)
    # spec 004: the cached sandwich state no longer describes the summary slot.
    CompactionState.objects.filter(session=locked).update(
        strategy="", summary="", range_start=None, range_end=None, compressed_at=None
    )
    session.window_start_seq = locked.window_start_seq
    return snapshot
