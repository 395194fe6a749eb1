"""Summarisers: the Anthropic Messages API (official SDK) and the offline default.

Which one a session gets (``for_session``):

- ``ANTHROPIC_API_KEY`` set and the summary model is Anthropic's (the policy's
  ``compaction.model``, else the session's own model — spec 000 §2.6.2):
  ``AnthropicSummarizer``;
- otherwise the deterministic ``OfflineSummarizer`` (DESIGN.md: the default
  without a key). ``CONTEXTSVC_SUMMARIZER=offline|anthropic`` forces one.

Errors become ``SummarizerError`` (→ SERVICE_UNAVAILABLE, spec 004 CX-NT3);
429, 5xx, 529 (overloaded), timeouts and connection failures are marked
transient, so the Celery task retries them with backoff. The SDK retries them
itself first (``max_retries``, honouring ``retry-after``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any

from django.conf import settings

from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.summarize import (
    Summarizer,
    SummarizerError,
    SummaryRequest,
    SummaryResult,
)

DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 2
TRANSIENT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def load_sdk() -> ModuleType:
    """The ``anthropic`` SDK, imported on first use.

    The one deliberate function-local import: the SDK takes seconds to import,
    and a process that never summarises with it (no ANTHROPIC_API_KEY, the
    offline summariser, manage.py commands) must not pay that at start-up.
    Workers load it once per process (``tasks._warm_up``).
    """
    import anthropic

    return anthropic


@dataclass
class AnthropicSummarizer:
    """``messages.create`` without tools (spec 000 §2.6 step 3)."""

    api_key: str
    base_url: str | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout: float = DEFAULT_TIMEOUT
    name: str = "anthropic"
    _client: Any = field(default=None, repr=False)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _client(self.api_key, self.base_url, self.max_retries, self.timeout)
        return self._client

    def complete(self, request: SummaryRequest) -> SummaryResult:
        anthropic = load_sdk()
        if not request.model:
            raise SummarizerError("No model to summarise with", transient=False)
        # Building the body is the service's work; only the SDK call (its own
        # encoding, the HTTP round trip, decoding) counts as the model's time.
        body = request.anthropic_body()
        started = time.perf_counter()
        try:
            response = self.client.messages.create(
                model=body["model"],
                max_tokens=body["max_tokens"],
                system=body["system"],
                messages=body["messages"],
            )
        except anthropic.APITimeoutError as exc:
            raise SummarizerError(f"Summariser timed out: {exc}", transient=True) from exc
        except anthropic.APIConnectionError as exc:
            raise SummarizerError(f"Summariser unreachable: {exc}", transient=True) from exc
        except anthropic.APIStatusError as exc:
            status = exc.status_code
            raise SummarizerError(
                f"Summariser answered {status}: {_error_message(exc)}",
                transient=status in TRANSIENT_STATUSES or status >= 500,
                status=status,
            ) from exc
        done = time.perf_counter()
        text = "".join(
            getattr(block, "text", "")
            for block in response.content
            if getattr(block, "type", "") == "text"
        )
        usage = getattr(response, "usage", None)
        parse_s = time.perf_counter() - done
        return SummaryResult(
            text=text,
            model=getattr(response, "model", None) or request.model,
            summarizer=self.name,
            input_tokens=getattr(usage, "input_tokens", 0) or 0,
            output_tokens=getattr(usage, "output_tokens", 0) or 0,
            duration_ms=(time.perf_counter() - started - parse_s) * 1000,
        )


@lru_cache(maxsize=8)
def _client(api_key: str, base_url: str | None, max_retries: int, timeout: float) -> Any:
    """One SDK client per configuration and process: building one loads the CA
    bundle and a connection pool (tens of ms), and the pool is worth keeping."""
    kwargs: dict[str, Any] = {"api_key": api_key, "max_retries": max_retries, "timeout": timeout}
    # The SDK reads ANTHROPIC_BASE_URL itself when base_url is None.
    if base_url:
        kwargs["base_url"] = base_url
    return load_sdk().Anthropic(**kwargs)


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc)


def is_anthropic_model(model: str) -> bool:
    """Whether ``model`` names one of Anthropic's models."""
    return model.lower().startswith(("claude", "anthropic"))


def for_session(*, model: str, provider: str = "") -> Summarizer:
    """The summariser for a summary with ``model`` (already resolved: policy > session)."""
    choice = settings.CONTEXTSVC_SUMMARIZER
    if choice == "offline":
        return OfflineSummarizer()
    api_key = settings.ANTHROPIC_API_KEY
    anthropic_model = is_anthropic_model(model) or (provider == "anthropic" and bool(model))
    if api_key and (anthropic_model or choice == "anthropic"):
        return AnthropicSummarizer(
            api_key=api_key,
            base_url=settings.ANTHROPIC_BASE_URL,
            max_retries=settings.CONTEXTSVC_SUMMARIZER_MAX_RETRIES,
            timeout=float(settings.CONTEXTSVC_SUMMARIZER_TIMEOUT),
        )
    if choice == "anthropic":
        raise SummarizerError("CONTEXTSVC_SUMMARIZER=anthropic but ANTHROPIC_API_KEY is not set")
    return OfflineSummarizer()


@dataclass
class TimedSummarizer:
    """Wraps a summariser and adds up the time spent in it (the run's ``llm_ms``)."""

    inner: Summarizer
    llm_ms: float = 0.0
    calls: int = 0
    models: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    def complete(self, request: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        try:
            result = self.inner.complete(request)
        except Exception:
            self.llm_ms += (time.perf_counter() - started) * 1000
            self.calls += 1
            raise
        elapsed = (time.perf_counter() - started) * 1000
        # A remote summariser reports the time of the call itself; the offline
        # one does its work in-process, all of which counts.
        self.llm_ms += result.duration_ms if result.duration_ms > 0 else elapsed
        self.calls += 1
        self.models.append(result.model)
        return result
