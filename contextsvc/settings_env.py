"""Reading the environment: typed getters over the declarations in contextsvc/variables/.

Every read names a declared variable (``env_int("CONTEXTSVC_MAX_BATCH")``) and
gets its declared type and default; an undeclared name, a getter of another
type, or a second default for a variable whose default is declared is a
programming error (TypeError). A value that cannot be parsed, or is out of its
declared range, raises ImproperlyConfigured naming the variable, so a typo in
production is a crash at start-up rather than a silent default. An empty value
counts as unset. String and URL variables can also come from a file named by
``NAME_FILE`` (docker secrets).
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from contextsvc.variables import VARIABLES, Variable

BASE_DIR = Path(__file__).resolve().parent.parent

_UNSET: object = object()
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def declared(name: str, kind: str) -> Variable:
    """The declaration of ``name``; it must exist and be of ``kind``."""
    variable = VARIABLES.get(name)
    if variable is None:
        raise TypeError(f"{name} is read but not declared (contextsvc/variables/)")
    if variable.kind != kind:
        raise TypeError(f"{name} is declared as {variable.kind}, read as {kind}")
    return variable


def _default(variable: Variable, given: object) -> object:
    if variable.derived:
        if given is _UNSET:
            raise TypeError(f"{variable.name}'s default is derived: the reader passes it")
        return given
    if given is not _UNSET:
        raise TypeError(f"{variable.name}'s default is declared ({variable.default!r})")
    return variable.default


def _raw(name: str, *, from_file: bool = False) -> str | None:
    """The value of ``name`` (or the file ``NAME_FILE`` names); None when unset or blank."""
    file_name = os.environ.get(f"{name}_FILE") if from_file else None
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {exc}") from exc
    value = os.environ.get(name)
    return None if value is None or value.strip() == "" else value


def env_str(name: str, default: object = _UNSET) -> str | None:
    variable = declared(name, "str")
    value = _raw(name, from_file=True)
    return _default(variable, default) if value is None else value


def env_bool(name: str, default: object = _UNSET) -> bool:
    """true/false, yes/no, on/off or 1/0 (any case)."""
    variable = declared(name, "bool")
    value = _raw(name)
    if value is None:
        return bool(_default(variable, default))
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false)")


def env_int(name: str, default: object = _UNSET) -> int:
    """An integer within the declared minimum and maximum."""
    variable = declared(name, "int")
    value = _raw(name)
    if value is None:
        return int(_default(variable, default))
    try:
        number = int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from exc
    if variable.minimum is not None and number < variable.minimum:
        raise ImproperlyConfigured(f"{name}={number} must be >= {variable.minimum}")
    if variable.maximum is not None and number > variable.maximum:
        raise ImproperlyConfigured(f"{name}={number} must be <= {variable.maximum}")
    return number


def env_url(name: str, default: object = _UNSET) -> str | None:
    """An http(s) URL with a host, trailing slashes dropped."""
    variable = declared(name, "url")
    value = _raw(name, from_file=True)
    if value is None:
        fallback = _default(variable, default)
        return None if fallback is None else str(fallback).rstrip("/")
    scheme, _, rest = value.strip().partition("://")
    if scheme.lower() not in ("http", "https") or not rest.strip("/"):
        raise ImproperlyConfigured(f"{name}={value!r} is not an http(s) URL")
    return value.strip().rstrip("/")


def env_list(name: str, default: object = _UNSET) -> list[str]:
    """Comma-separated items, blanks dropped."""
    variable = declared(name, "list")
    value = _raw(name)
    if value is None:
        return list(_default(variable, default))
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str) -> str:
    """One of the declared choices (any case), lower-cased."""
    variable = declared(name, "choice")
    value = _raw(name)
    if value is None:
        return str(variable.default)
    lowered = value.strip().lower()
    if lowered not in variable.choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(variable.choices)}")
    return lowered


def env_path(name: str, default: object = _UNSET) -> Path:
    variable = declared(name, "path")
    value = _raw(name)
    return Path(_default(variable, default) if value is None else value)


VAR_DIR = env_path("CONTEXTSVC_VAR_DIR", BASE_DIR / "var")
# The broker, the result backend and the per-key limits' storage default to it.
REDIS_URL = env_str("REDIS_URL")
