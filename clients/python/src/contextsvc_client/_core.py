"""What the sync and async clients share: the requests each operation sends, and the retry rule.

Every operation is built here once as a :class:`Call` (method, path, query,
body, whether a retry after a lost answer is safe); the two clients only send
calls and sleep between attempts, each in its own way.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
import uuid
from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Literal
from urllib.parse import quote

import httpx

from .errors import ConnectionFailedError, error_from_response

Json = dict[str, Any]
# A tool output to upload: whole (bytes, text), or streamed (a binary file, chunks).
UploadData = bytes | str | IO[bytes] | Iterable[bytes] | AsyncIterable[bytes]
MessageFormat = Literal["anthropic", "openai", "responses"]
ContextFormat = Literal["anthropic", "openai", "responses", "raw"]
ContextPurpose = Literal["call", "read"]


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before trying a call again.

    Retried: 429 and 503 (the service changed nothing; ``Retry-After`` is
    honoured up to ``max_retry_after``) and transport failures. A failure
    after the request may have reached the service (a read timeout, a dropped
    connection) is retried only for calls that are safe to repeat: reads,
    PUTs, deletes, and appends and retractions, which carry an Idempotency-Key.
    """

    max_retries: int = 4
    backoff: float = 0.25  # first wait, doubled each attempt, with full jitter
    max_backoff: float = 8.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, response: httpx.Response | None = None) -> float:
        if response is not None:
            after = retry_after_seconds(response.headers.get("retry-after"))
            if after is not None:
                return min(after, self.max_retry_after)
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))


NO_RETRIES = RetryPolicy(max_retries=0)
RETRY_STATUSES = frozenset({429, 503})


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date (RFC 9110)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class Call:
    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    content: Any = None  # bytes, or a stream httpx reads once
    headers: dict[str, str] = field(default_factory=dict)
    # Safe to send again when the answer was lost (the request may have been applied).
    idempotent: bool = True
    # A streamed body cannot be sent twice: no retry of any kind.
    retryable: bool = True
    # Parse the body as JSON (False: a 204 or raw bytes).
    returns_json: bool = True

    def request_kwargs(self) -> dict[str, Any]:
        headers = self.headers
        content = self.content
        if self.json is not None:
            content = json.dumps(self.json, separators=(",", ":"), ensure_ascii=False).encode()
            headers = {**headers, "Content-Type": "application/json"}
        return {"params": self.params, "content": content, "headers": headers}


def may_retry(call: Call, exc: httpx.TransportError) -> bool:
    """Whether a transport failure leaves the call safe to repeat."""
    # A failed connect or pool wait never sent the request.
    return call.idempotent or isinstance(exc, (httpx.ConnectError, httpx.PoolTimeout))


Outcome = httpx.Response | httpx.TransportError


def retry_wait(policy: RetryPolicy, call: Call, attempt: int, outcome: Outcome) -> float | None:
    """Seconds to wait before trying ``call`` again, or None when ``outcome`` is final."""
    if not call.retryable or attempt >= policy.max_retries:
        return None
    if isinstance(outcome, httpx.TransportError):
        return policy.delay(attempt) if may_retry(call, outcome) else None
    if outcome.status_code in RETRY_STATUSES:
        return policy.delay(attempt, outcome)
    return None


def final_answer(call: Call, outcome: Outcome) -> Any:
    """The parsed JSON answer of a final outcome (None for a 204 or raw body), or its typed error."""
    if isinstance(outcome, httpx.TransportError):
        raise ConnectionFailedError(f"{call.method} {call.path}: {outcome!r}") from outcome
    if outcome.status_code >= 400:
        raise error_from_response(outcome)
    return outcome.json() if call.returns_json and outcome.status_code != 204 else None


def new_idempotency_key() -> str:
    return f"cx-{uuid.uuid4().hex}"


def _sid(sid: str) -> str:
    return quote(sid, safe="")


def _drop_none(values: Mapping[str, Any]) -> Json:
    return {k: v for k, v in values.items() if v is not None}


# --- sessions -------------------------------------------------------------------


def create_session_call(fields: Mapping[str, Any]) -> Call:
    # A retried create of a chosen id answers 409 the second time: the caller
    # decides (get_or_create); without an id a retry could make a second session.
    return Call(
        "POST", "/sessions", json=_drop_none(fields), idempotent=fields.get("id") is not None
    )


def get_session_call(sid: str) -> Call:
    return Call("GET", f"/sessions/{_sid(sid)}")


def list_sessions_call(params: Mapping[str, Any]) -> Call:
    return Call("GET", "/sessions", params=_drop_none(params))


def delete_session_call(sid: str) -> Call:
    return Call("DELETE", f"/sessions/{_sid(sid)}", returns_json=False)


def set_system_call(sid: str, sections: Sequence[Mapping[str, Any]]) -> Call:
    return Call("PUT", f"/sessions/{_sid(sid)}/system", json=list(sections))


def set_tools_call(sid: str, tools: Sequence[Mapping[str, Any]]) -> Call:
    return Call("PUT", f"/sessions/{_sid(sid)}/tools", json=list(tools))


# --- messages, context, usage ---------------------------------------------------------


def append_call(
    sid: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    format: MessageFormat | None = None,  # noqa: A002 - the API's name
    idempotency_key: str | None = None,
) -> Call:
    # One key per append, kept across its retries: the service answers a
    # repeat with the stored answer instead of storing the batch twice.
    return Call(
        "POST",
        f"/sessions/{_sid(sid)}/messages",
        params={"format": format} if format else None,
        json={"messages": list(messages)},
        headers={"Idempotency-Key": idempotency_key or new_idempotency_key()},
    )


def retract_call(
    sid: str, *, last: int | None, from_seq: int | None, idempotency_key: str | None = None
) -> Call:
    if (last is None) == (from_seq is None):
        raise ValueError("give exactly one of last or from_seq")
    return Call(
        "POST",
        f"/sessions/{_sid(sid)}/messages/retract",
        json=_drop_none({"last": last, "from_seq": from_seq}),
        headers={"Idempotency-Key": idempotency_key or new_idempotency_key()},
    )


def context_call(
    sid: str,
    *,
    format: ContextFormat,  # noqa: A002
    extra_tokens: int,
    purpose: ContextPurpose | None = None,
) -> Call:
    params: Json = {"format": format}
    if extra_tokens:
        params["extra_tokens"] = extra_tokens
    if purpose is not None:
        params["purpose"] = purpose
    return Call("GET", f"/sessions/{_sid(sid)}/context", params=params)


def budget_call(sid: str, *, extra_tokens: int) -> Call:
    params = {"extra_tokens": extra_tokens} if extra_tokens else None
    return Call("GET", f"/sessions/{_sid(sid)}/budget", params=params)


def usage_call(sid: str, report: Mapping[str, Any]) -> Call:
    # Not repeated after a lost answer: a second report would be a second call.
    return Call("POST", f"/sessions/{_sid(sid)}/usage", json=_drop_none(report), idempotent=False)


def calls_call(sid: str, *, cursor: int | None, limit: int) -> Call:
    return Call(
        "GET", f"/sessions/{_sid(sid)}/calls", params=_drop_none({"cursor": cursor, "limit": limit})
    )


def call_call(sid: str, call_id: int) -> Call:
    return Call("GET", f"/sessions/{_sid(sid)}/calls/{int(call_id)}")


# --- compaction -------------------------------------------------------------------------


def compact_call(sid: str, fields: Mapping[str, Any]) -> Call:
    # A repeat joins the run already queued (the service answers joined: true).
    return Call("POST", f"/sessions/{_sid(sid)}/compact", json=_drop_none(fields))


def snapshot_call(sid: str) -> Call:
    return Call("GET", f"/sessions/{_sid(sid)}/snapshot")


# --- tool outputs ---------------------------------------------------------------------


def upload_output_call(sid: str, data: UploadData, *, tool_name: str) -> Call:
    # Stored by content hash: a repeat answers 200 with the same ref.
    headers = {"Content-Type": "application/octet-stream"}
    if tool_name:
        headers["X-Tool-Name"] = tool_name
    path = f"/sessions/{_sid(sid)}/outputs"
    if isinstance(data, str | bytes | bytearray | memoryview):
        body = data.encode() if isinstance(data, str) else bytes(data)
        return Call("PUT", path, content=body, headers=headers)
    # Streamed as it is read (chunked), never held whole; so it goes once.
    return Call("PUT", path, content=data, headers=headers, retryable=False)


def read_ref_call(ref: str, *, offset: int, limit: int, max_line_length: int | None) -> Call:
    params = _drop_none({"offset": offset, "limit": limit, "max_line_length": max_line_length})
    return Call("GET", f"/refs/{_sid(ref)}", params=params)


def grep_ref_call(
    ref: str,
    pattern: str,
    *,
    context: int,
    max_matches: int,
    ignore_case: bool,
    start_line: int,
) -> Call:
    params: Json = {"pattern": pattern, "context": context, "max_matches": max_matches}
    if ignore_case:
        params["ignore_case"] = "true"
    if start_line != 1:
        params["start_line"] = start_line
    return Call("GET", f"/refs/{_sid(ref)}/grep", params=params)


def usage_fields(
    input_tokens: int,
    output_tokens: int,
    cache_creation_tokens: int,
    cache_read_tokens: int,
    through_seq: int | None,
) -> Json:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_tokens": cache_creation_tokens,
        "cache_read_tokens": cache_read_tokens,
        "through_seq": through_seq,
    }


DEFAULT_TIMEOUT = 60.0


def api_base(base_url: str) -> str:
    """The API root from the service's address (``/api/v1`` added unless given)."""
    base = base_url.rstrip("/")
    return base if base.endswith("/api/v1") else f"{base}/api/v1"


USER_AGENT = "contextsvc-client/0.1.0 (python)"


def auth_headers(api_key: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
        **(extra or {}),
    }


def http_options(
    base_url: str, api_key: str, headers: Mapping[str, str] | None, timeout: float, transport: Any
) -> dict[str, Any]:
    """The keyword arguments of the httpx client a client makes for itself."""
    return {
        "base_url": api_base(base_url),
        "headers": auth_headers(api_key, headers),
        "timeout": timeout,
        "transport": transport,
    }
