"""NUL characters in API input: refused with a 422 naming the field, except tool output data.

PostgreSQL ``text`` and ``jsonb`` cannot hold U+0000, so a NUL that reached
the database would fail the request with a 500 (and on SQLite silently cut
the text). The check runs once on the raw body: JSON can only carry a NUL
as the escape ``\\u0000`` (a bare control byte is malformed JSON), so a body
without those six bytes, nearly every body, costs one ``memmem`` scan and
no Python walk. Only a body that has them is walked to name the field.

Tool output *content* is data, not text the service interprets: it is kept
(the append path stores it losslessly as bytes and escapes the NUL in the
in-context view, see :func:`escape`).
"""

from __future__ import annotations

from typing import Any

from contextsvc.errors import ValidationFailed

NUL = "\x00"
# How a NUL is shown in text that goes into the context (U+2400 SYMBOL FOR NULL):
# visible to the model and unambiguous, unlike a backslash escape.
NUL_SHOWN = "\u2400"
_ESCAPED = b"\\u0000"


# A tool output's cost asked for before the call returns (``tools/preview``,
# ``tools/reserve``): its ``text`` is output data too, and is never stored.
_COST_KEYS = frozenset({"tool_call_id", "bytes", "tokens", "text"})


def _message_exempt(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "tool"


def find_nul(data: Any, path: tuple[str, ...] = ()) -> str | None:
    """The dotted path of the first string (value or key) holding a NUL, or None.

    A body shaped like an append (``{"messages": [...]}``) has its tool
    messages' text content exempt, a tool output cost request its ``text``.
    """
    stack: list[tuple[Any, tuple[str, ...], bool]] = [(data, path, False)]
    while stack:
        value, where, tool_content = stack.pop()
        if isinstance(value, str):
            if NUL in value and not tool_content:
                return ".".join(where) or "body"
        elif isinstance(value, dict):
            top_messages = not where and isinstance(value.get("messages"), list)
            cost_text = not where and "text" in value and value.keys() <= _COST_KEYS
            for key, item in value.items():
                if NUL in key:
                    return ".".join((*where, key))
                if cost_text and key == "text":
                    continue
                if top_messages and key == "messages":
                    for i, message in enumerate(item):
                        stack.extend(_message_items(message, (*where, key, str(i))))
                    continue
                stack.append((item, (*where, key), False))
        elif isinstance(value, list):
            stack.extend((item, (*where, str(i)), False) for i, item in enumerate(value))
    return None


def _message_items(message: Any, where: tuple[str, ...]) -> list[tuple[Any, tuple[str, ...], bool]]:
    if not isinstance(message, dict):
        return [(message, where, False)]
    exempt = _message_exempt(message)
    out: list[tuple[Any, tuple[str, ...], bool]] = []
    for key, item in message.items():
        here = (*where, key)
        if exempt and key == "content":
            if isinstance(item, str):
                continue
            if isinstance(item, list):
                for j, part in enumerate(item):
                    out.extend(_part_items(part, (*here, str(j))))
                continue
        out.append((item, here, False))
    return out


def _part_items(part: Any, where: tuple[str, ...]) -> list[tuple[Any, tuple[str, ...], bool]]:
    # A text part's text is the output itself; its other keys (and media
    # parts) are stored as JSON and must be NUL-free.
    if isinstance(part, dict) and part.get("type") == "text":
        return [(v, (*where, k), k == "text") for k, v in part.items()]
    return [(part, where, False)]


def reject_in_body(raw: bytes, data: Any) -> None:
    """422 naming the field when the parsed ``data`` of ``raw`` holds a NUL where text must not."""
    # A body without a backslash has no escape at all: one memchr, ~1 ms for
    # 30 MB where the six-byte search takes ~14 ms, with the GIL held either way.
    if b"\\" not in raw or _ESCAPED not in raw:
        return
    field = find_nul(data)
    if field is not None:
        raise_for(field)


def reject_in_text(value: str | None, field: str) -> None:
    """The same rule for one path, query or header value."""
    if value and NUL in value:
        raise_for(field)


def raise_for(field: str) -> None:
    raise ValidationFailed(
        f"{field}: text must not contain NUL characters (\\u0000)",
        details={"field": field, "reason": "nul"},
    )


def escape(text: str) -> str:
    """``text`` with each NUL shown as U+2400 (for the in-context view of an output)."""
    return text.replace(NUL, NUL_SHOWN) if NUL in text else text


def escape_content(content: Any) -> Any:
    """A message content (text or parts) with NULs in its text escaped; unchanged if none."""
    if isinstance(content, str):
        return escape(content)
    if isinstance(content, list):
        return [
            {**p, "text": escape(p["text"])}
            if isinstance(p, dict) and isinstance(p.get("text"), str) and NUL in p["text"]
            else p
            for p in content
        ]
    return content
