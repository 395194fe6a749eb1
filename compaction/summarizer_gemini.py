"""The Gemini summariser: ``POST {base}/v1beta/models/{model}:generateContent``, no tools.

Plain httpx, no SDK (Google's is not a dependency, and one POST needs none), so what the
official SDKs do for the other summarisers is done here the same way: ``max_retries``
retries of a transient failure (429, 5xx, timeouts, connection errors) with exponential
backoff, honouring the server's ``retry-after`` header or the error's
``RetryInfo.retryDelay`` up to a minute; then every failure becomes a ``SummarizerError``,
transient or not by the rules the others follow (``summarizer_rules``). The key travels as
``x-goog-api-key``, never in the URL (URLs end up in logs).

A refusal is an error, not a summary: a blocked prompt (``promptFeedback.blockReason``, no
candidates) or an answer stopped for any reason but ``STOP`` / ``MAX_TOKENS`` (``SAFETY``,
``RECITATION``, ``PROHIBITED_CONTENT`` …) fails the run, which leaves the session as it was.
Not transient: the same request would be refused again.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import httpx

from contextsvc.engine.budget import split_model_id
from contextsvc.engine.summarize import SummarizerError, SummaryRequest, SummaryResult

from .summarizer_rules import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, is_transient

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
KEY_HEADER = "x-goog-api-key"
# A summary cut at the output limit is still one (``extract_retain_summary`` takes the rest of
# an unclosed tag), as for the other summarisers; any other finish is a refusal.
ANSWERED = frozenset({"STOP", "MAX_TOKENS"})
# The SDKs' backoff: 0.5 s doubling to 8 s, with jitter; a server's own delay is
# honoured up to a minute (a longer wait is the task's retry, not a blocked worker's).
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 8.0
MAX_SERVER_DELAY = 60.0
_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


class _Retry(Exception):
    """A transient failure another attempt may get past."""

    def __init__(self, error: SummarizerError, delay: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.delay = delay


@lru_cache(maxsize=8)
def _client(timeout: float) -> httpx.Client:
    """One client (a connection pool) per timeout and process, as for the SDK clients."""
    return httpx.Client(timeout=timeout)


def model_path(model: str) -> str:
    """The model's URL segment: no provider prefix (``google/…``) or ``models/``, quoted."""
    bare = split_model_id(model)[1].removeprefix("models/")
    return quote(bare, safe="-._~")


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return response.text[:500] or response.reason_phrase


def server_delay(response: httpx.Response) -> float | None:
    """Seconds the server asks to wait: ``retry-after`` (seconds or a date), else the
    error's ``RetryInfo.retryDelay`` (``"37s"``); None when it says nothing usable."""
    header = response.headers.get("retry-after")
    if header:
        try:
            return max(0.0, float(header))
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(header).timestamp() - time.time())
            except (TypeError, ValueError):
                pass
    try:
        details = response.json().get("error", {}).get("details") or ()
    except (ValueError, AttributeError):
        return None
    for detail in details:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            match = _DELAY.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def _refusal(data: dict[str, Any]) -> str | None:
    """Why the answer is no summary (module doc), or None."""
    blocked = (data.get("promptFeedback") or {}).get("blockReason")
    if blocked:
        return f"the prompt was blocked ({blocked})"
    candidates = data.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return "no candidate in the answer"
    finish = candidates[0].get("finishReason")
    if finish is not None and finish not in ANSWERED:
        return f"the answer stopped with {finish}"
    return None


def _text(data: dict[str, Any]) -> str:
    """Candidate 0's answer text; thought parts (the model's thinking) are not the summary."""
    parts = (data["candidates"][0].get("content") or {}).get("parts") or ()
    return "".join(
        p["text"]
        for p in parts
        if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
    )


@dataclass
class GeminiSummarizer:
    """``generateContent`` with the body of ``SummaryRequest.gemini_body``
    (docs/concepts/compaction.md#summary-request)."""

    api_key: str
    base_url: str | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout: float = DEFAULT_TIMEOUT
    model: str = ""
    name: str = "gemini"
    # Seconds slept between attempts; a test may replace it.
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def url(self, model: str) -> str:
        base = (self.base_url or DEFAULT_BASE_URL).rstrip("/")
        return f"{base}/v1beta/models/{model_path(model)}:generateContent"

    def complete(self, request: SummaryRequest) -> SummaryResult:
        if not request.model:
            raise SummarizerError("No model to summarise with", transient=False)
        body = request.gemini_body()
        url = self.url(request.model)
        spent = 0.0  # the calls only, not the waits between them
        for attempt in range(self.max_retries + 1):
            started = time.perf_counter()
            try:
                data = self._post(url, body)
            except _Retry as retry:
                spent += time.perf_counter() - started
                if attempt == self.max_retries:
                    raise retry.error from retry
                backoff = min(MAX_BACKOFF, INITIAL_BACKOFF * 2**attempt)
                delay = retry.delay
                if delay is None or delay > MAX_SERVER_DELAY:
                    delay = backoff * (1 - 0.25 * random.random())  # noqa: S311 - jitter
                self.sleep(delay)
                continue
            spent += time.perf_counter() - started
            break
        refusal = _refusal(data)
        if refusal:
            raise SummarizerError(f"Summariser refused: {refusal}", transient=False)
        usage = data.get("usageMetadata") or {}
        return SummaryResult(
            text=_text(data),
            model=data.get("modelVersion") or request.model,
            summarizer=self.name,
            input_tokens=int(usage.get("promptTokenCount") or 0),
            output_tokens=int(usage.get("candidatesTokenCount") or 0)
            + int(usage.get("thoughtsTokenCount") or 0),
            duration_ms=spent * 1000,
        )

    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        """One attempt: the answer's JSON, or ``_Retry`` / ``SummarizerError``."""
        headers = {KEY_HEADER: self.api_key, "content-type": "application/json"}
        try:
            response = _client(float(self.timeout)).post(url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise _Retry(SummarizerError(f"Summariser timed out: {exc}", transient=True)) from exc
        except httpx.TransportError as exc:
            error = SummarizerError(f"Summariser unreachable: {exc}", transient=True)
            raise _Retry(error) from exc
        status = response.status_code
        if status >= 400:
            error = SummarizerError(
                f"Summariser answered {status}: {_error_message(response)}",
                transient=is_transient(status),
                status=status,
            )
            if error.transient:
                raise _Retry(error, server_delay(response))
            raise error
        try:
            data = response.json()
        except ValueError as exc:
            raise SummarizerError(f"Summariser answered no JSON: {exc}", transient=True) from exc
        if not isinstance(data, dict):
            raise SummarizerError("Summariser answered no JSON object", transient=True)
        return data
