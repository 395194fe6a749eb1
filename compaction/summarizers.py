"""Summarisers: Anthropic Messages and any Chat Completions server (official SDKs), Gemini, offline.

Which one a session gets (``for_session``): ``policy.compaction.summarizer``,
else ``CONTEXTSVC_SUMMARIZER``; ``auto`` picks

- ``AnthropicSummarizer`` when it has a key and the summary model is
  Anthropic's (the policy's ``compaction.model``, else the session's own
  model — docs/concepts/compaction.md#summary-model — or a session of provider ``anthropic``);
- else ``GeminiSummarizer`` (``summarizer_gemini``, plain httpx) when it has a key
  and the summary model is Google's (a ``gemini-…`` model, or a session of
  provider ``google``);
- else ``OpenAISummarizer`` when it is configured (a key or a base URL): any
  OpenAI-compatible server — OpenAI, vLLM, Ollama, LiteLLM;
- else the deterministic ``OfflineSummarizer`` (DESIGN.md: the default
  without a key).

The model (``summary_model``): ``policy.compaction.model``, else the
summariser's own (``CONTEXTSVC_SUMMARIZER_<PROVIDER>_MODEL``, a cheap model of
its provider), else — ``session`` — the session's model.

Errors become ``SummarizerError`` (→ SERVICE_UNAVAILABLE,
docs/concepts/compaction.md#summarizer-failure); 429, 5xx, 529 (overloaded), timeouts and connection
failures are marked transient, so the Celery task retries them with backoff. The SDKs retry them
themselves first (``max_retries``, honouring ``retry-after``). A 400 (a bad
request, an unknown model, a prompt over the window) or a bad key is not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any

from django.conf import settings

from contextsvc.engine.budget import split_model_id
from contextsvc.engine.offline_summarizer import OfflineSummarizer
from contextsvc.engine.summarize import (
    Summarizer,
    SummarizerError,
    SummaryRequest,
    SummaryResult,
)

from .summarizer_gemini import GeminiSummarizer
from .summarizer_rules import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, is_transient

# A summariser's model setting that means "the session's own model".
SESSION_MODEL = "session"
# Sent as the key to a Chat Completions server configured without one (a local
# vLLM or Ollama): the SDK insists on some key.
NO_KEY = "unused"


def load_sdk() -> ModuleType:
    """The ``anthropic`` SDK, imported on first use.

    Deliberate function-local imports (here and in ``load_openai_sdk``): an SDK
    takes seconds to import, and a process that never summarises with it (no
    key, the offline summariser, manage.py commands) must not pay that at
    start-up. A worker loads the configured ones once, before its pool forks
    (``tasks._warm_up``).
    """
    import anthropic

    return anthropic


def load_openai_sdk() -> ModuleType:
    """The ``openai`` SDK, imported on first use (see ``load_sdk``)."""
    import openai

    return openai


def _call(sdk: ModuleType, create: Callable[[], Any]) -> Any:
    """``create()`` with the SDK's errors mapped to ``SummarizerError`` (both SDKs
    share the exception names: timeout ⊂ connection error, status errors)."""
    try:
        return create()
    except sdk.APITimeoutError as exc:
        raise SummarizerError(f"Summariser timed out: {exc}", transient=True) from exc
    except sdk.APIConnectionError as exc:
        raise SummarizerError(f"Summariser unreachable: {exc}", transient=True) from exc
    except sdk.APIStatusError as exc:
        status = exc.status_code
        raise SummarizerError(
            f"Summariser answered {status}: {_error_message(exc)}",
            transient=is_transient(status),
            status=status,
        ) from exc


@dataclass
class AnthropicSummarizer:
    """``messages.create`` without tools (docs/concepts/compaction.md#summary-request)."""

    api_key: str
    base_url: str | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout: float = DEFAULT_TIMEOUT
    # The configured model (``summary_model``); "" or ``session``: the session's.
    model: str = ""
    name: str = "anthropic"
    _client: Any = field(default=None, repr=False)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _anthropic_client(
                self.api_key, self.base_url, self.max_retries, self.timeout
            )
        return self._client

    def complete(self, request: SummaryRequest) -> SummaryResult:
        if not request.model:
            raise SummarizerError("No model to summarise with", transient=False)
        # Building the body is the service's work; only the SDK call (its own
        # encoding, the HTTP round trip, decoding) counts as the model's time.
        body = request.anthropic_body()
        started = time.perf_counter()
        response = _call(
            load_sdk(),
            lambda: self.client.messages.create(
                model=body["model"],
                max_tokens=body["max_tokens"],
                system=body["system"],
                messages=body["messages"],
            ),
        )
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


@dataclass
class OpenAISummarizer:
    """``chat.completions.create`` without tools against any Chat Completions server.

    The body comes from the same assembler as the Anthropic one
    (``SummaryRequest.openai_body``): the system message, then text-only
    user/assistant turns starting with a user's — a history every
    OpenAI-compatible server's chat template accepts. ``max_tokens`` is the
    output limit every such server knows.
    """

    api_key: str | None = None
    base_url: str | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout: float = DEFAULT_TIMEOUT
    model: str = ""
    name: str = "openai"
    _client: Any = field(default=None, repr=False)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _openai_client(
                self.api_key or NO_KEY, self.base_url, self.max_retries, self.timeout
            )
        return self._client

    def complete(self, request: SummaryRequest) -> SummaryResult:
        if not request.model:
            raise SummarizerError("No model to summarise with", transient=False)
        body = request.openai_body()
        started = time.perf_counter()
        response = _call(
            load_openai_sdk(),
            lambda: self.client.chat.completions.create(
                model=body["model"], max_tokens=body["max_tokens"], messages=body["messages"]
            ),
        )
        done = time.perf_counter()
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        content = getattr(message, "content", None)
        usage = getattr(response, "usage", None)
        parse_s = time.perf_counter() - done
        return SummaryResult(
            text=content if isinstance(content, str) else "",
            model=getattr(response, "model", None) or request.model,
            summarizer=self.name,
            input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            output_tokens=getattr(usage, "completion_tokens", 0) or 0,
            duration_ms=(time.perf_counter() - started - parse_s) * 1000,
        )


# One SDK client per configuration and process: building one loads the CA
# bundle and a connection pool (tens of ms), and the pool is worth keeping.


@lru_cache(maxsize=8)
def _anthropic_client(api_key: str, base_url: str | None, max_retries: int, timeout: float) -> Any:
    kwargs: dict[str, Any] = {"api_key": api_key, "max_retries": max_retries, "timeout": timeout}
    # The SDK reads ANTHROPIC_BASE_URL itself when base_url is None.
    if base_url:
        kwargs["base_url"] = base_url
    return load_sdk().Anthropic(**kwargs)


@lru_cache(maxsize=8)
def _openai_client(api_key: str, base_url: str | None, max_retries: int, timeout: float) -> Any:
    kwargs: dict[str, Any] = {"api_key": api_key, "max_retries": max_retries, "timeout": timeout}
    # The SDK reads OPENAI_BASE_URL itself (else OpenAI's API) when base_url is None.
    if base_url:
        kwargs["base_url"] = base_url
    return load_openai_sdk().OpenAI(**kwargs)


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if body.get("message"):  # the openai SDK hands over the error object itself
            return str(body["message"])
    return str(exc)


def is_anthropic_model(model: str) -> bool:
    """Whether ``model`` names one of Anthropic's models."""
    return model.lower().startswith(("claude", "anthropic"))


def is_gemini_model(model: str) -> bool:
    """Whether ``model`` names one of Google's Gemini models (``google/…`` prefix or not)."""
    provider, bare = split_model_id(model)
    return provider == "google" or bare.lower().removeprefix("models/").startswith("gemini")


def anthropic_configured() -> bool:
    return bool(settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY)


def openai_configured() -> bool:
    return bool(
        settings.CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY
        or settings.CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL
    )


def gemini_configured() -> bool:
    return bool(settings.CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY)


def _anthropic() -> AnthropicSummarizer:
    return AnthropicSummarizer(
        api_key=settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY,
        base_url=settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_BASE_URL,
        max_retries=settings.CONTEXTSVC_SUMMARIZER_MAX_RETRIES,
        timeout=float(settings.CONTEXTSVC_SUMMARIZER_TIMEOUT),
        model=settings.CONTEXTSVC_SUMMARIZER_ANTHROPIC_MODEL or "",
    )


def _openai() -> OpenAISummarizer:
    return OpenAISummarizer(
        api_key=settings.CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY,
        base_url=settings.CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL,
        max_retries=settings.CONTEXTSVC_SUMMARIZER_MAX_RETRIES,
        timeout=float(settings.CONTEXTSVC_SUMMARIZER_TIMEOUT),
        model=settings.CONTEXTSVC_SUMMARIZER_OPENAI_MODEL or "",
    )


def _gemini() -> GeminiSummarizer:
    return GeminiSummarizer(
        api_key=settings.CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY,
        base_url=settings.CONTEXTSVC_SUMMARIZER_GEMINI_BASE_URL,
        max_retries=settings.CONTEXTSVC_SUMMARIZER_MAX_RETRIES,
        timeout=float(settings.CONTEXTSVC_SUMMARIZER_TIMEOUT),
        model=settings.CONTEXTSVC_SUMMARIZER_GEMINI_MODEL or "",
    )


def for_session(*, model: str, provider: str = "", choice: str | None = None) -> Summarizer:
    """The summariser for a session: ``choice`` (``policy.compaction.summarizer``),
    else ``CONTEXTSVC_SUMMARIZER``; ``auto`` decides by ``model`` (the policy's
    ``compaction.model``, else the session's) and ``provider`` (the session's)."""
    chosen = choice or settings.CONTEXTSVC_SUMMARIZER
    if chosen == "offline":
        return OfflineSummarizer()
    if chosen == "anthropic":
        if not anthropic_configured():
            raise SummarizerError(
                "The anthropic summariser has no key: set CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY"
                " (or ANTHROPIC_API_KEY)"
            )
        return _anthropic()
    if chosen == "openai":
        if not openai_configured():
            raise SummarizerError(
                "The openai summariser is not configured: set CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY"
                " and/or CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL"
            )
        return _openai()
    if chosen == "gemini":
        if not gemini_configured():
            raise SummarizerError(
                "The gemini summariser has no key: set CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY"
                " (or GEMINI_API_KEY)"
            )
        return _gemini()
    # A model named for its provider first; else the session's provider decides.
    if is_anthropic_model(model) and anthropic_configured():
        return _anthropic()
    if is_gemini_model(model) and gemini_configured():
        return _gemini()
    if provider == "anthropic" and model and anthropic_configured():
        return _anthropic()
    if provider == "google" and model and gemini_configured():
        return _gemini()
    if openai_configured():
        return _openai()
    return OfflineSummarizer()


def summary_model(summarizer: Summarizer, *, policy_model: str | None, session_model: str) -> str:
    """The model a summary is asked of: the policy's ``compaction.model``
    (docs/concepts/compaction.md#summary-model), else the summariser's configured one, else the
    session's."""
    if policy_model:
        return policy_model
    configured = getattr(summarizer, "model", "") or ""
    return session_model if configured in ("", SESSION_MODEL) else configured


@dataclass
class TimedSummarizer:
    """Wraps a summariser and adds up the time spent in it (the run's ``llm_ms``)."""

    inner: Summarizer
    llm_ms: float = 0.0
    calls: int = 0
    models: list[str] = field(default_factory=list)
    # What was asked and answered, for the run's cost record.
    exchanges: list[tuple[SummaryRequest, str]] = field(default_factory=list)

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
        self.exchanges.append((request, result.text))
        return result
