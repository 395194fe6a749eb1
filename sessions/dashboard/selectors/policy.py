"""The policy page: a session's effective policy, read field by field off the API's schema.

Nothing here names a policy field: the sections and fields come from
``PolicyIn`` (the schema ``PATCH /sessions/{sid}`` validates), so a knob
added to the schema appears on the page and in its form without a template
edit. Only the defaults that are not constants (``None`` in the schema:
"derived from the session") get a word of explanation, from ``DERIVED``.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import annotated_types as at
from django.conf import settings
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from contextsvc.engine.deferral import DEFAULT_DEFERRAL_THRESHOLD
from contextsvc.engine.output_trim import tool_output_budget
from contextsvc.engine.output_views import DEFAULT_VIEW_SHARE, resolve_view_config
from contextsvc.engine.strategies.chain import DEFAULT_CHAIN
from sessions import accounting
from sessions.models import PolicyChange, Session
from sessions.schemas_policy import PolicyIn
from sessions.selectors import app_budget_blocks

GENERAL = "general"  # the page's name for the schema's top-level scalar fields


def _unwrap(annotation: Any) -> Any:
    """``X | None`` → ``X``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def field_kind(annotation: Any) -> tuple[str, list[str]]:
    """How a field is typed into the form: (kind, choices).

    bool → a three-way select (default / true / false); Literal → a select;
    numbers and strings → one line; a list of strings → one item per line;
    anything else (a list of objects) → JSON.
    """
    ann = _unwrap(annotation)
    if ann is bool:
        return "bool", ["true", "false"]
    if typing.get_origin(ann) is Literal:
        return "choice", [str(a) for a in typing.get_args(ann)]
    if ann is int:
        return "int", []
    if ann is float:
        return "float", []
    if ann is str:
        return "text", []
    if typing.get_origin(ann) is list and typing.get_args(ann) == (str,):
        return "lines", []
    return "json", []


def _constraints(info: FieldInfo) -> str:
    marks = ((at.Gt, "gt", ">"), (at.Ge, "ge", "≥"), (at.Lt, "lt", "<"), (at.Le, "le", "≤"))
    out = []
    for meta in info.metadata:
        for cls, attr, sign in marks:
            if isinstance(meta, cls):
                value = getattr(meta, attr)
                out.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value}")
        if isinstance(meta, at.MaxLen) and field_kind(info.annotation)[0] in ("lines", "json"):
            out.append(f"at most {meta.max_length:,} items")
        elif isinstance(meta, at.MaxLen):
            out.append(f"at most {meta.max_length:,} characters")
    return ", ".join(out)


# Defaults that are not constants: what applies while the field is unset.
Derived = Callable[[Session], str]


def _budget_tokens(session: Session) -> str:
    limits = accounting.limits_of(session)
    config = resolve_view_config(session.policy)
    tokens = tool_output_budget(config, limits.context_window, limits.effective_window)
    return (
        f"{tokens:,} tokens (clamp(window × 0.25, 20,000, 60,000), at most half the usable window)"
    )


def _view_share(session: Session) -> str:
    limit = accounting.limits_of(session).limit
    tokens = resolve_view_config({}, limit=limit).view_tokens or 0
    return f"{DEFAULT_VIEW_SHARE} of the usable window: views over {tokens:,} tokens are cut"


def _thresholds(session: Session) -> str:
    limits = accounting.limits_of(session)
    return f"off: compaction starts at thresholds.compact_at of {limits.effective_window:,} usable"


DERIVED: dict[str, Derived] = {
    "compaction.threshold_ratio": _thresholds,
    "compaction.model": lambda s: "the summariser's configured model, else the session's",
    "compaction.summarizer": lambda s: f"{settings.CONTEXTSVC_SUMMARIZER} (CONTEXTSVC_SUMMARIZER)",
    "compaction.strategy": lambda s: "chain",
    "compaction.chain": lambda s: " → ".join(DEFAULT_CHAIN),
    "compaction.summary_prompt": lambda s: "the built-in prompt",
    "compaction.retain_prompt": lambda s: "the built-in prompt",
    "compaction.compression_prompt": lambda s: "the built-in prompt",
    "tool_output_cache.preset": lambda s: "default",
    "tool_output_cache.context_budget_tokens": _budget_tokens,
    "tool_output_cache.view_share": _view_share,
    "tool_deferral_threshold": lambda s: f"{DEFAULT_DEFERRAL_THRESHOLD} of the usable window",
    "final_report_tool": lambda s: settings.CONTEXTSVC_FINAL_REPORT_TOOL,
    "prompt_cache.min_cacheable_tokens": lambda s: "the model profile's minimum",
    "targets": lambda s: "none: only the session's own model",
    "proxy.client_tool_search": lambda s: "set by the proxy when the client defers its tools",
}

_UNSET = object()


@dataclass(slots=True)
class PolicyField:
    path: str  # "compaction.auto"; a top-level field: its name
    name: str
    kind: str
    choices: list[str]
    constraints: str
    default: Any
    derived: str  # what an unset field resolves to, when the default is not a constant
    overridden: bool
    override: Any
    error: str = ""
    raw: str | None = None  # what the operator typed, shown back with an error

    @property
    def effective(self) -> Any:
        return self.override if self.overridden else self.default

    @property
    def effective_text(self) -> str:
        if not self.overridden and self.default is None:
            return self.derived or "—"
        return format_value(self.effective)

    @property
    def default_text(self) -> str:
        if self.default is None:
            return self.derived or "unset"
        return format_value(self.default)

    @property
    def input_value(self) -> str:
        """The input's text: the override, or empty (the default applies)."""
        if self.raw is not None:
            return self.raw
        if not self.overridden:
            return ""
        return input_text(self.kind, self.override)


@dataclass(slots=True)
class PolicySection:
    name: str
    fields: list[PolicyField]
    error: str = ""

    @property
    def overridden(self) -> int:
        return sum(1 for f in self.fields if f.overridden)


@dataclass(slots=True)
class PolicyView:
    sections: list[PolicySection]
    state: dict[str, Any] = field(default_factory=dict)  # live blocks: auto, circuit breaker
    changes: list[PolicyChange] = field(default_factory=list)

    def field(self, path: str) -> PolicyField | None:
        return next((f for s in self.sections for f in s.fields if f.path == path), None)


def format_value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ", ".join(value) if value else "(none)"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def input_text(kind: str, value: Any) -> str:
    if value is None:
        return ""
    if kind == "bool":
        return "true" if value else "false"
    if kind == "lines":
        return "\n".join(str(v) for v in value)
    if kind == "json":
        return json.dumps(value, indent=2, ensure_ascii=False)
    return str(value)


def _field(session: Session, path: str, name: str, info: FieldInfo, stored: Any) -> PolicyField:
    kind, choices = field_kind(info.annotation)
    derived = DERIVED.get(path)
    return PolicyField(
        path=path,
        name=name,
        kind=kind,
        choices=choices,
        constraints=_constraints(info),
        default=None if info.default is None else info.get_default(call_default_factory=True),
        derived=derived(session) if derived else "",
        overridden=stored is not _UNSET,
        override=None if stored is _UNSET else stored,
    )


def policy_schema_sections(session: Session, policy: dict[str, Any]) -> list[PolicySection]:
    """Every section and field of ``PolicyIn``, with ``policy``'s overrides marked."""
    sections: list[PolicySection] = []
    general = PolicySection(name=GENERAL, fields=[])
    for name, info in PolicyIn.model_fields.items():
        ann = _unwrap(info.annotation)
        if _is_model(ann):
            stored = policy.get(name) or {}
            sections.append(
                PolicySection(
                    name=name,
                    fields=[
                        _field(session, f"{name}.{fname}", fname, finfo, stored.get(fname, _UNSET))
                        for fname, finfo in ann.model_fields.items()
                    ],
                )
            )
        else:
            general.fields.append(_field(session, name, name, info, policy.get(name, _UNSET)))
    if general.fields:
        sections.append(general)
    return sections


def policy_view(session: Session, *, history: int = 20) -> PolicyView:
    """The policy page: the schema's fields, this session's overrides, the live
    compaction state (auto, circuit breaker) and the latest changes."""
    blocks = app_budget_blocks(session)
    return PolicyView(
        sections=policy_schema_sections(session, session.policy or {}),
        state={k: blocks[k] for k in ("compaction",) if blocks.get(k)},
        changes=list(PolicyChange.objects.filter(session=session).order_by("-id")[:history]),
    )
