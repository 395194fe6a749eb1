"""Provider-native messages posted to the REST API (``?format=anthropic|openai|responses|gemini``).

The proxy's converters (``contextsvc.engine.providers``) turn the agent's
list into transcript messages; each is then held to ``MessageIn``, the
service's own shape, so a native batch meets every rule a plain one does.
Any error is a 422 naming the field of the list as the agent sent it and the
format rule it breaks; it is raised before anything is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pydantic

from contextsvc.engine.providers import native
from contextsvc.errors import ValidationFailed
from sessions.schemas import MessageIn

from .inputs import MessageData


def native_messages(
    fmt: str, raw: Any, open_calls: Mapping[str, str] | None = None
) -> list[MessageData]:
    """``raw`` (a list in format ``fmt``) as the messages the append service takes.

    ``open_calls``: the session's unanswered calls (id → name, in call order):
    a Gemini function response without an id answers the oldest of its name.
    """
    try:
        converted, starts = native.to_transcript(
            fmt, raw, open_calls=list((open_calls or {}).items())
        )
    except native.NativeFormatError as exc:
        raise ValidationFailed(
            f"{exc.path}: not a valid {fmt} message: {exc.message}",
            details={"field": exc.path, "format": fmt},
        ) from None
    out: list[MessageData] = []
    for k, message in enumerate(converted):
        try:
            out.append(cast(MessageData, MessageIn.model_validate(message).model_dump()))
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            field = f"messages.{starts[k]}"
            raise ValidationFailed(
                f"{field}: as {fmt} converts it, {where or 'the message'}: {first['msg']}",
                details={"field": field, "format": fmt},
            ) from None
    return out
