"""The one-call answer of ``GET /sessions/{sid}/calls/{id}``: the record and its side-by-side."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .schemas_out import ContextCallOut, Out


class CallAccountOut(Out):
    """The client's request beside what was sent (docs/proxy.md#what-changed)."""

    client: dict[str, Any] | None = Field(
        ...,
        description="proxy: what the client's request carried — messages (as in its previous "
        "request, appended, where in the transcript), system and tools (digests, names), "
        "fields; null for a REST build",
    )
    changes: dict[str, Any] | None = Field(
        ...,
        description="proxy: fields passed / replaced / dropped / added; tools added / "
        "deferred / removed; cache markers (client's, sent); synthetic items",
    )
    since_previous: dict[str, Any] | None = Field(
        ..., description="proxy: what the client changed since its previous proxied call"
    )
    messages: list[dict[str, Any]] = Field(
        ...,
        description="the transcript by seq range as sent: kept, view (each listed with its "
        "state), summarised, not sent",
    )
    added: list[dict[str, Any]] = Field(
        ..., description="what no message holds: summary, retain, notes, final instruction"
    )
    breakpoints: list[dict[str, Any]] = Field(..., description="the cache breakpoints placed")


class ContextCallDetailOut(ContextCallOut):
    account: CallAccountOut | None = Field(
        ..., description="null for a record written before accounts were kept"
    )
