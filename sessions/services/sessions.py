"""Writes of a session's settings: create, update (limits and policy), prompt sections."""

from __future__ import annotations

import secrets
from typing import Any

import pydantic
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from contextsvc.engine.budget import DEFAULT_BLOCK_RATIO, DEFAULT_COMPACT_RATIO, Thresholds
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import PromptSection
from contextsvc.engine.prompt import check_kind
from contextsvc.engine.tokens import estimate_sections, get_tokenizer
from contextsvc.errors import Conflict, ValidationFailed
from sessions import accounting, hotpath, status
from sessions.models import AgentKey, Session
from sessions.schemas_policy import PolicyIn

from .checks import check_item_count, reject_duplicate_names
from .inputs import PolicyData, SectionData, SessionCreateData, SessionPatchData
from .policy_audit import policy_change_record

LIMIT_FIELDS = ("context_window", "max_output_tokens", "buffer_tokens", "tokenizer")


def _check_policy(policy: PolicyData) -> None:
    """422 naming the field unless ``policy`` passes the API's policy schema.

    Checked here too, not only by the API: a stored policy is read by every
    later call, so one bad number (or type) would break the session for good.
    """
    try:
        PolicyIn.model_validate(policy)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(("policy", *(str(p) for p in first["loc"])))
        raise ValidationFailed(f"{field}: {first['msg']}", details={"field": field}) from None


def _normalise_policy(policy: PolicyData, *, tokenizer: str) -> PolicyData:
    """Validate cross-field rules and resolve each extra target's limits once."""
    policy = {k: v for k, v in policy.items() if v is not None}
    thresholds = policy.get("thresholds")
    if thresholds is not None:
        # A partial section keeps the defaults for what it leaves out, stored
        # whole so that every reader sees both numbers.
        merged = {"compact_at": DEFAULT_COMPACT_RATIO, "block_at": DEFAULT_BLOCK_RATIO}
        merged.update(thresholds)
        try:
            Thresholds(compact_ratio=merged["compact_at"], block_ratio=merged["block_at"])
        except EngineValidationError as exc:
            raise ValidationFailed(
                f"policy.thresholds: {exc.message}", details={"field": "policy.thresholds"}
            ) from None
        policy["thresholds"] = merged
    targets = []
    for i, target in enumerate(policy.get("targets") or []):
        provider = target["provider"]
        explicit = {
            k: target.get(k) for k in ("context_window", "max_output_tokens", "buffer_tokens")
        }
        try:
            limits = accounting.resolve_session_limits(
                provider=provider, model=target["model"], explicit=explicit
            )
        except ValueError as exc:
            raise ValidationFailed(
                f"policy.targets[{i}]: {exc}", details={"field": f"policy.targets.{i}"}
            ) from exc
        targets.append(
            {
                "provider": provider,
                "model": target["model"],
                "context_window": limits.context_window,
                "max_output_tokens": limits.max_output_tokens,
                "buffer_tokens": limits.buffer_tokens,
                "tokenizer": limits.tokenizer or tokenizer,
            }
        )
    if targets:
        policy["targets"] = targets
    return policy


def session_create(
    *, owner: AgentKey, data: SessionCreateData, via: str = "api", client: str = ""
) -> Session:
    """Create a session of ``owner``; 409 when its id is taken, 422 for bad limits or policy.

    ``via`` ("api" or "proxy") and ``client`` (``engine.user_agents.client_label``) say
    where it came from, for the sessions list; the service sets them, not the payload."""
    model = data["model"]
    provider = data.get("provider") or accounting.infer_provider(model)
    explicit: dict[str, Any] = {k: data.get(k) for k in LIMIT_FIELDS}
    limits = accounting.resolve_session_limits(provider=provider, model=model, explicit=explicit)
    get_tokenizer(limits.tokenizer)  # an unknown tokenizer is a 422 now, not at first append
    _check_policy(data.get("policy") or {})
    policy = _normalise_policy(data.get("policy") or {}, tokenizer=limits.tokenizer)
    external_id = data.get("id") or f"ses_{secrets.token_hex(8)}"
    try:
        with transaction.atomic():
            return Session.objects.create(
                owner=owner,
                external_id=external_id,
                agent=data.get("agent") or owner.name,
                model=model,
                provider=provider,
                context_window=limits.context_window,
                max_output_tokens=limits.max_output_tokens,
                buffer_tokens=limits.buffer_tokens,
                tokenizer=limits.tokenizer,
                policy=policy,
                via=via,
                client=client[:64],
            )
    except IntegrityError as exc:
        raise Conflict(f"Session {external_id!r} already exists", details={"field": "id"}) from exc


@transaction.atomic
def session_update(*, session: Session, data: SessionPatchData, actor: str = "service") -> Session:
    """Apply a PATCH under the session lock: limits re-resolved, policy sections replaced.

    A policy that changes leaves an audit line (``PolicyChange``) naming ``actor``:
    the operator, the agent key, or the service itself (the proxy's own settings).
    """
    session = hotpath.lock_session(session.pk)
    for field in ("agent", "model", "provider"):
        value = data.get(field)
        if value is not None:
            setattr(session, field, value)
    if any(data.get(k) is not None for k in (*LIMIT_FIELDS, "model", "provider")):
        # Fields the patch leaves out keep their current values.
        explicit: dict[str, Any] = {}
        for k in LIMIT_FIELDS:
            value = data.get(k)
            explicit[k] = value if value is not None else getattr(session, k)
        limits = accounting.resolve_session_limits(
            provider=session.provider, model=session.model, explicit=explicit
        )
        tokenizer_changed = limits.tokenizer != session.tokenizer
        session.context_window = limits.context_window
        session.max_output_tokens = limits.max_output_tokens
        session.buffer_tokens = limits.buffer_tokens
        session.tokenizer = limits.tokenizer
        if tokenizer_changed:
            get_tokenizer(limits.tokenizer)
    patch = data.get("policy")
    if patch is not None:
        # The patch replaces whole sections, so checking it checks what changes.
        _check_policy(patch)
        old_policy = session.policy or {}
        merged = {**old_policy, **patch}
        session.policy = _normalise_policy(merged, tokenizer=session.tokenizer)
        policy_change_record(session=session, old=old_policy, actor=actor)
    status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save()
    return session


@transaction.atomic
def session_set_sections(*, session: Session, sections: list[SectionData]) -> Session:
    """Replace the prompt sections; counted once here, never per request.

    Everything is checked before anything is written: a bad section leaves the
    old ones in place.
    """
    check_item_count(
        sections, "section", settings.CONTEXTSVC_MAX_SECTIONS, "CONTEXTSVC_MAX_SECTIONS"
    )
    reject_duplicate_names(sections, "section")
    parsed = [PromptSection(**s) for s in sections]
    for i, section in enumerate(parsed):
        check_kind(section, i)
    session = hotpath.lock_session(session.pk)
    tokenizer = accounting.tokenizer_of(session)
    session.sections = sections
    session.system_tokens = estimate_sections([s for s in parsed if s.kind != "skill"], tokenizer)
    session.skill_tokens = estimate_sections([s for s in parsed if s.kind == "skill"], tokenizer)
    status.refresh_guard(session)
    session.updated_at = timezone.now()
    session.save()
    return session
