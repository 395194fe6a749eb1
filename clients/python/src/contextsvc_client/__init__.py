"""Python client for contextsvc: sync (:class:`Client`) and async (:class:`AsyncClient`).

Framework adapters live in submodules that need their framework installed:
``contextsvc_client.agents`` (OpenAI Agents SDK session) and
``contextsvc_client.langchain`` (LangChain v1 agent middleware).
"""

from __future__ import annotations

from ._core import (
    NO_RETRIES,
    Call,
    ContextFormat,
    ContextPurpose,
    Json,
    MessageFormat,
    RetryPolicy,
    UploadData,
)
from .aio import AsyncClient, AsyncSession
from .client import Client, Session
from .errors import (
    ConflictError,
    ConnectionFailedError,
    ContextsvcError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    ServiceUnavailableError,
    UnauthorizedError,
    ValidationError,
)

__all__ = [
    "NO_RETRIES",
    "AsyncClient",
    "AsyncSession",
    "Call",
    "Client",
    "ConflictError",
    "ConnectionFailedError",
    "ContextFormat",
    "ContextPurpose",
    "ContextsvcError",
    "Json",
    "MessageFormat",
    "NotFoundError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "RetryPolicy",
    "ServiceUnavailableError",
    "Session",
    "UnauthorizedError",
    "UploadData",
    "ValidationError",
]
