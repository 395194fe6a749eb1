"""Compaction settings: Django settings first, then the environment, then a default.

``contextsvc/settings.py`` belongs to the project; until these names are added
there (with its env helpers), they are read here the same way, and a bad value
fails loudly (ImproperlyConfigured) like the settings module's helpers.

| name | default | meaning |
|---|---|---|
| CONTEXTSVC_AUTO_COMPACT | true | enqueue compactions from the append/usage hook |
| CONTEXTSVC_SUMMARIZER | auto | auto / offline / anthropic |
| CONTEXTSVC_SUMMARIZER_MAX_RETRIES | 2 | the SDK's own retries (429 / 5xx / 529) |
| CONTEXTSVC_SUMMARIZER_TIMEOUT | 120 | seconds per summary call |
| CONTEXTSVC_COMPACTION_QUEUE | (default queue) | route runs to ``celery worker -Q <queue>`` |
| CONTEXTSVC_COMPACT_WAIT_SECONDS | 120 | how long ``wait: true`` waits for a run a worker holds |
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _raw(name: str) -> Any:
    value = getattr(settings, name, None)
    if value is None or value == "":
        value = os.environ.get(name)
    return None if value == "" else value


def setting_str(name: str, default: str | None = None) -> str | None:
    value = _raw(name)
    return default if value is None else str(value)


def setting_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false)")


def setting_number(name: str, default: float, *, minimum: float = 0) -> float:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from exc
    if number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be >= {minimum}")
    return number
