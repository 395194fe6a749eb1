"""What happened to one upstream call: status, provider error, stream events, timings.

A ``Watch`` follows a call from the moment it is sent: the first byte, the
stream's events (and whether its final one came: ``message_stop``, ``[DONE]``,
``response.completed``), an error the provider sent inside the stream. When the
call ends, ``outcome_record`` writes it on the call's record and counts a
failed call on its session (docs/proxy.md#failed-calls).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from contextsvc.engine.providers.sse import SseEvent
from sessions.services.outcome import call_outcome_record

from .pooled import release_connections

logger = logging.getLogger(__name__)

# The event that ends a stream normally, by its SSE event name (a provider API whose
# events have no name says its own: ``Dialect.ends_stream``).
_FINAL = frozenset({"message_stop", "response.completed", "response.incomplete"})


def named_end(event: SseEvent) -> bool:
    """The final event of a stream whose events are named, or OpenAI's ``[DONE]``."""
    return event.event in _FINAL or event.data.strip() == "[DONE]"


@dataclass(slots=True)
class Watch:
    started_ns: int = 0
    first_ns: int = 0
    events: int = 0
    ended: bool = False  # the stream's final event arrived
    error_type: str = ""
    error_message: str = ""
    retries: int = 0  # upstream asked again for the same build (after an overflow)

    def start(self) -> None:
        self.started_ns, self.first_ns = time.time_ns(), 0
        self.events, self.ended = 0, False
        self.error_type = self.error_message = ""

    def first(self) -> None:
        if not self.first_ns:
            self.first_ns = time.time_ns()

    def see(self, event: SseEvent, *, final: bool) -> None:
        """One event of the stream (``final``: the one that ends it): counted; errors noted."""
        self.events += 1
        name = event.event
        if final:
            self.ended = True
        elif name in ("error", "response.failed") or event.data.startswith('{"error"'):
            self._error_from(event.data)

    def _error_from(self, data: str) -> None:
        try:
            body = json.loads(data)
        except ValueError:
            self.error_type, self.error_message = "error", data[:500]
            return
        if not isinstance(body, dict):
            return
        error = body.get("error") or (body.get("response") or {}).get("error") or body
        if isinstance(error, dict):
            self.error_type = str(error.get("type") or error.get("code") or "error")[:100]
            self.error_message = str(error.get("message") or "")

    def error(self, kind: str, message: str) -> None:
        self.error_type, self.error_message = kind[:100], message

    def values(
        self, *, client: int | None, upstream: int | None, cut: bool = False, streamed: bool = False
    ) -> dict[str, Any]:
        """The record's outcome fields; ``failed`` when upstream did not answer in full."""
        now = time.time_ns()
        failed = upstream is None or upstream >= 300 or cut or bool(self.error_type)
        return {
            "upstream_status": upstream,
            "client_status": client,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "retries": self.retries,
            "stream_cut": cut,
            "stream_events": self.events if streamed else None,
            "ttfb_ms": (self.first_ns - self.started_ns) / 1e6 if self.first_ns else None,
            "total_ms": (now - self.started_ns) / 1e6 if self.started_ns else None,
            "failed": failed,
        }


def write_outcome(call_id: int | None, session_pk: int, values: dict[str, Any]) -> None:
    """``outcome_record`` from a thread of the caller's (logged, never raised)."""
    try:
        call_outcome_record(call_id=call_id, session_pk=session_pk, values=values)
    except Exception:
        logger.exception("proxy: could not record the outcome of call %s", call_id)
    finally:
        release_connections()


async def outcome_record(call_id: int | None, session_pk: int, values: dict[str, Any]) -> None:
    await sync_to_async(write_outcome)(call_id, session_pk, values)
