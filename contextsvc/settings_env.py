"""Reading the environment for the settings: helpers that fail loudly, and shared paths.

Every helper raises ImproperlyConfigured on a value it cannot parse, so a typo
in production is a crash at start-up rather than a silent default. Used by
``contextsvc.settings`` and the settings groups it imports
(``contextsvc.settings_celery``, ``contextsvc.settings_auth``).
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str | None = None) -> str | None:
    """A string from NAME, or from the file named by NAME_FILE (docker secrets)."""
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {exc}") from exc
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool) -> bool:
    """true/false, yes/no, on/off or 1/0 (any case)."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false)")


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """An integer, at least ``minimum`` and at most ``maximum`` when given."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from exc
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be >= {minimum}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} must be <= {maximum}")
    return number


def env_url(name: str, default: str | None = None) -> str | None:
    """An http(s) URL with a host (trailing slashes dropped)."""
    value = env_str(name)
    if value is None:
        return default
    scheme, _, rest = value.strip().partition("://")
    if scheme.lower() not in ("http", "https") or not rest.strip("/"):
        raise ImproperlyConfigured(f"{name}={value!r} is not an http(s) URL")
    return value.strip().rstrip("/")


def env_list(name: str, default: list[str]) -> list[str]:
    """Comma-separated items, blanks dropped."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (any case), lower-cased."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    if lowered not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(choices)}")
    return lowered


VAR_DIR = Path(os.environ.get("CONTEXTSVC_VAR_DIR", BASE_DIR / "var"))
# The broker, the result backend and the per-key limits' storage default to it.
REDIS_URL = env_str("REDIS_URL")
