"""The policy form: operator input → a policy PATCH, checked by the API's own schema.

The form has one input per schema field (see ``selectors.policy``); an empty
input means "not overridden" (the default applies). Only the sections that
differ from what is stored go into the patch, as the API's PATCH takes them
(whole sections), so the audit line names exactly what the operator changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pydantic
from django.http import QueryDict

from sessions.schemas_policy import PolicyIn

from .selectors.policy import GENERAL, PolicySection


@dataclass(slots=True)
class PolicyForm:
    patch: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # field path or section name → message
    raw: dict[str, str] = field(default_factory=dict)

    @property
    def is_valid(self) -> bool:
        return not self.errors


def _value(kind: str, text: str) -> Any:
    """The typed text as the schema's validator takes it (it does the coercion and the checks)."""
    if kind == "bool":
        if text not in ("true", "false"):
            raise ValueError("choose true or false")
        return text == "true"
    if kind == "lines":
        return [line.strip() for line in text.splitlines() if line.strip()]
    if kind == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON ({exc.msg}, line {exc.lineno})") from None
    return text.strip()


def error_path(loc: tuple[Any, ...], sections: list[PolicySection]) -> str:
    """The form field (``section.field``) or section a pydantic error location points at."""
    names = {s.name: {f.name for f in s.fields} for s in sections if s.name != GENERAL}
    if loc and loc[0] in names:
        if len(loc) > 1 and loc[1] in names[loc[0]]:
            return f"{loc[0]}.{loc[1]}"
        return str(loc[0])
    return str(loc[0]) if loc else GENERAL


def parse_policy_form(
    data: QueryDict, sections: list[PolicySection], stored: dict[str, Any]
) -> PolicyForm:
    """Read the form, validate the whole policy with ``PolicyIn`` (every field's
    error at once), and keep in the patch the sections that differ from ``stored``."""
    form = PolicyForm()
    candidate: dict[str, Any] = {}
    for section in sections:
        values: dict[str, Any] = {}
        for f in section.fields:
            text = data.get(f.path, "")
            form.raw[f.path] = text
            if not text.strip():
                continue
            try:
                values[f.name] = _value(f.kind, text)
            except ValueError as exc:
                form.errors[f.path] = str(exc)
        if section.name == GENERAL:
            candidate.update(values)
        else:
            candidate[section.name] = values or None
    try:
        typed = PolicyIn.model_validate(candidate).model_dump(exclude_unset=True)
    except pydantic.ValidationError as exc:
        for err in exc.errors():
            path = error_path(tuple(err["loc"]), sections)
            where = ".".join(str(p) for p in err["loc"][2:])
            message = err["msg"].removeprefix("Value error, ")
            form.errors.setdefault(path, f"{where}: {message}" if where else message)
        return form
    if form.errors:
        return form
    for name in PolicyIn.model_fields:
        new, old = typed.get(name), stored.get(name)
        if (new or None) != (old or None):
            form.patch[name] = new
    return form
