"""The gate every JSON request body passes, on the REST API and on the proxy alike.

In order: the size (a body over its route's limit is refused with a 413
naming the limit, before it is read when ``Content-Length`` says so), strict
JSON (orjson: no NaN or Infinity, no lone surrogate, no number that is
infinite as a double; text in UTF-16 or UTF-32 is read as such), and the NUL
character (PostgreSQL's text and jsonb cannot hold it; ``contextsvc.nul``
says where it is allowed). Free-form JSON (tool inputs and schemas, content
parts) nests at most ``MAX_JSON_DEPTH`` levels: the check is ``check_json``,
run on those values only, so a big history is not walked again.

A refusal is a ``BodyRefused`` naming the field; each surface answers it in
its own error shape (the API's ``{"error": {...}}``, the provider's on the
proxy). The rules are documented in docs/api.md and docs/proxy.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson
from django.conf import settings

# Free-form JSON nests at most this deep: the stored JSON is later rendered
# inside the context body, and the renderer (orjson) stops at 255 levels, which
# would make a 500 of every later context call.
MAX_JSON_DEPTH = 64
# Integers in free-form JSON: the renderer (orjson) writes 64-bit ones only.
JSON_INT_RANGE = range(-(2**63), 2**64)


class BodyRefused(Exception):
    """A request body refused at the gate: ``field`` names where (``body`` for the whole)."""

    def __init__(self, message: str, field: str = "body", status: int = 400) -> None:
        super().__init__(f"{field}: {message}")
        self.message = f"{field}: {message}"
        self.field = field
        self.status = status


def body_limit(path: str) -> int:
    """The largest body, in bytes, the route at ``path`` takes.

    One limit for every JSON body today (``CONTEXTSVC_MAX_JSON_BODY``); a
    route that needs a tighter one is added here.
    """
    return settings.CONTEXTSVC_MAX_JSON_BODY


def too_large(limit: int) -> BodyRefused:
    return BodyRefused(f"the request body exceeds the limit of {limit} bytes", status=413)


def declared_length(headers: Mapping[str, str]) -> int | None:
    """The body's size as ``Content-Length`` declares it (None: not declared or not a number)."""
    value = headers.get("content-length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def check_declared(headers: Mapping[str, str], limit: int) -> None:
    """Refuse, before reading it, a body whose declared size is over ``limit``."""
    length = declared_length(headers)
    if length is not None and length > limit:
        raise too_large(limit)


def check_read(raw: bytes, limit: int) -> None:
    """Refuse a body that turned out bigger than ``limit`` (sent without ``Content-Length``)."""
    if len(raw) > limit:
        raise too_large(limit)


def parse_json(raw: bytes) -> Any:
    """``raw`` as JSON, strictly: what orjson refuses is refused (module doc), naming ``body``."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        text = _other_encoding(raw)
        if text is None:
            raise BodyRefused(f"not valid JSON ({exc})") from exc
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BodyRefused(f"not valid JSON ({exc})") from exc


def _other_encoding(raw: bytes) -> bytes | None:
    """UTF-8 of a body written in UTF-16 or UTF-32 (JSON's other encodings); None otherwise."""
    encoding = json.detect_encoding(raw)
    if encoding in ("utf-8", "utf-8-sig"):
        return None
    try:
        return raw.decode(encoding).encode("utf-8")
    except UnicodeError:
        return None  # a lone surrogate written raw: not text


def json_problem(value: Any) -> str | None:
    """Why free-form ``value`` cannot be stored (too deep, an integer past 64 bits), or None."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is dict:
            children: Any = item.values()
        elif kind is list:
            children = item
        else:
            if kind is int and item not in JSON_INT_RANGE:
                return "an integer outside the 64-bit range"
            continue
        if depth > MAX_JSON_DEPTH:
            return f"nested deeper than {MAX_JSON_DEPTH} levels"
        for child in children:
            kind = type(child)
            if kind is dict or kind is list or kind is int:
                push((child, depth + 1))
    return None


def check_json(value: Any, field: str) -> Any:
    """``value`` unchanged, or ``BodyRefused`` naming ``field`` (``json_problem``)."""
    problem = json_problem(value)
    if problem is not None:
        raise BodyRefused(problem, field)
    return value
