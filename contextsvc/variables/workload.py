"""Declared environment variables: sessions, compaction, request limits, per-key
limits, upstreams and the proxy process (see contextsvc/variables/declaration.py)."""

from __future__ import annotations

from contextsvc.engine.summarize import SUMMARIZERS

from .declaration import Derived, Variable

VARIABLES = (
    # --- sessions -------------------------------------------------------------------
    Variable(
        "CONTEXTSVC_FINAL_REPORT_TOOL", "sessions", "str", "final_report",
        "name of the tool left on a `final` verdict (per session: `policy.final_report_tool`)",
    ),
    Variable(
        "CONTEXTSVC_TASK_STATUS_TOOL", "sessions", "str", "task_status",
        "name of the agent's progress tool; like the final-report tool it is not counted in the"
        " schema tokens",
    ),
    Variable(
        "CONTEXTSVC_IDEMPOTENCY_TTL_HOURS", "sessions", "int", 24,
        "hours an `Idempotency-Key` is remembered", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_EXACT_TOKEN_CHARS", "sessions", "int", 256 * 1024,
        "characters an append counts exactly per request; a message past what is left gets the "
        "bounded estimate (`token_count_estimated`) and an exact count in a worker ([Token "
        "estimates](api.md#token-estimates)); 0: every message over 2 Ki characters is "
        "estimated", minimum=0, shown="262144 (256 Ki characters)",
    ),
    Variable(
        "CONTEXTSVC_OUTPUT_RETENTION_DAYS", "sessions", "int", 7,
        "stored tool outputs nothing references are collected after this many days (`manage.py "
        "gc_outputs`, daily in beat)", minimum=0,
    ),
    Variable(
        "CONTEXTSVC_GREP_TIME_LIMIT_MS", "sessions", "int", 10_000,
        "a grep of a stored output gives up (422) after this many milliseconds", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_RECALL_INDEX_DELAY", "sessions", "int", 10,
        "seconds after an append a worker indexes the session for `history_search` (0: only the"
        " sweep, a search and a compaction do)", minimum=0,
    ),
    Variable(
        "CONTEXTSVC_RECALL_CATCH_UP_BYTES", "sessions", "int", 8 * 1024 * 1024,
        "backlog a search indexes first, at most", minimum=0, shown="8388608 (8 MiB)",
    ),
    Variable(
        "CONTEXTSVC_RECALL_SCAN_SEGMENTS", "sessions", "int", 20_000,
        "on SQLite, the most ~2 KiB segments a search walks", minimum=1,
    ),
    # --- compaction -----------------------------------------------------------------
    Variable(
        "CONTEXTSVC_AUTO_COMPACT", "compaction", "bool", True,
        "enqueue a compaction when the budget says one is due; `false` leaves only explicit "
        "ones (`POST /compact`, the `compact_context` tool, the overflow path)",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER", "compaction", "choice", "auto",
        "who writes summaries ([Summarisers](compaction.md)): `auto` is Anthropic for a Claude "
        "summary model with a key, Gemini for a Gemini one with a key, else the "
        "OpenAI-compatible one when configured, else offline; per session: "
        "`policy.compaction.summarizer`", choices=SUMMARIZERS,
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY", "compaction", "str",
        Derived("`ANTHROPIC_API_KEY`"),
        "the Anthropic summariser's key",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_ANTHROPIC_BASE_URL", "compaction", "url",
        Derived("`ANTHROPIC_BASE_URL`, else the SDK's default"),
        "the Anthropic summariser's server",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_ANTHROPIC_MODEL", "compaction", "str", "claude-haiku-4-5",
        "the Anthropic summariser's model (`session`: the session's own; "
        "`policy.compaction.model` wins)",
    ),
    Variable(
        "ANTHROPIC_API_KEY", "compaction", "str", None,
        "fallback of `CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY`",
    ),
    Variable(
        "ANTHROPIC_BASE_URL", "compaction", "url", None,
        "fallback of `CONTEXTSVC_SUMMARIZER_ANTHROPIC_BASE_URL`",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL", "compaction", "url", None,
        "summaries from any Chat Completions server (OpenAI, vLLM, Ollama, LiteLLM): its URL "
        "with the version path (`http://host:8000/v1`); an `OPENAI_API_KEY` alone does not turn"
        " these on",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY", "compaction", "str", None,
        "that server's key (a server that needs none needs only the URL)",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_OPENAI_MODEL", "compaction", "str", "gpt-4.1-mini",
        "that server's summary model",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY", "compaction", "str",
        Derived("`GEMINI_API_KEY`"),
        "the Gemini summariser's key (sent as `x-goog-api-key`)",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_GEMINI_BASE_URL", "compaction", "url",
        "https://generativelanguage.googleapis.com",
        "the Gemini summariser's server, without the version path: it adds "
        "`/v1beta/models/{model}:generateContent`",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_GEMINI_MODEL", "compaction", "str", "gemini-2.5-flash-lite",
        "the Gemini summariser's model (`session`: the session's own; "
        "`policy.compaction.model` wins)",
    ),
    Variable(
        "GEMINI_API_KEY", "compaction", "str", None,
        "fallback of `CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY`",
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_MAX_RETRIES", "compaction", "int", 2,
        "a summariser's own retries of a summary call (429 / 5xx / 529, timeouts) before the "
        "run's task retries with backoff", minimum=0,
    ),
    Variable(
        "CONTEXTSVC_SUMMARIZER_TIMEOUT", "compaction", "int", 120,
        "seconds per summary call", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_COMPACT_WAIT_SECONDS", "compaction", "int", 120,
        "how long `wait: true`, the `compact_context` tool and the overflow path wait for a run"
        " another executor holds",
        minimum=0,
    ),
    Variable(
        "CONTEXTSVC_COMPACTION_LEASE_SECONDS", "compaction", "int", 10,
        "a run's holder renews its lease this long every third of it; a lapsed run is requeued "
        "by whoever looks next", minimum=3,
    ),
    Variable(
        "CONTEXTSVC_COMPACTION_MAX_ATTEMPTS", "compaction", "int", 4,
        "claims of a run whose holder was lost before it is failed (the session unchanged)",
        minimum=1,
    ),
    Variable(
        "CONTEXTSVC_CONTEXT_WAIT_SECONDS", "compaction", "int", 5,
        "the most `GET /context` at `block` waits for a compaction another executor holds",
        minimum=0,
    ),
    # --- request limits -------------------------------------------------------------
    Variable(
        "CONTEXTSVC_MAX_JSON_BODY", "limits", "int", 32 * 1024 * 1024,
        "largest JSON body in bytes anywhere (the proxy's provider calls carry whole "
        "histories); bigger: 413", minimum=1024, shown="33554432 (32 MiB)",
    ),
    Variable(
        "CONTEXTSVC_MAX_UPLOAD_BYTES", "limits", "int", 256 * 1024 * 1024,
        "largest raw tool-output upload in bytes", minimum=1, shown="268435456 (256 MiB)",
    ),
    Variable(
        "CONTEXTSVC_MAX_BATCH", "limits", "int", 1000,
        "messages in one append; more: 422, nothing stored", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_MAX_SECTIONS", "limits", "int", 100,
        "prompt sections per session; more: 422 naming the first over the limit, nothing "
        "applied", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_MAX_API_JSON_BYTES", "limits", "int", 4 << 20,
        "bytes of a REST API JSON body; past it a 413 read from the headers (the body is "
        "never read) that points to the streamed output upload. The proxy is not capped by it",
        minimum=65536, shown="4 MiB",
    ),
    Variable(
        "CONTEXTSVC_MAX_TOOLS", "limits", "int", 1000,
        "tool definitions per session; more: 422 naming the first over the limit, nothing "
        "applied", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_REF_RESPONSE_MAX_BYTES", "limits", "int",
        Derived("`CONTEXTSVC_SLICE_MAX_BYTES`"),
        "largest answer of a ref read or grep (and their built-in tools), which says how to "
        "continue", minimum=4096,
    ),
    Variable(
        "CONTEXTSVC_SLICE_MAX_BYTES", "limits", "int", 256 * 1024,
        "the older name of `CONTEXTSVC_REF_RESPONSE_MAX_BYTES`, its default",
        minimum=4096, shown="262144 (256 KiB)",
    ),
    # --- per-key limits ([API](api.md), per-key limits) ----------------------------------
    Variable(
        "CONTEXTSVC_RATE_LIMIT", "per-key limits", "str", "1500/minute",
        "request rates per agent key (`N/second`, `N/minute`, `;` between; `off`); past them "
        "429 + `Retry-After`",
    ),
    Variable(
        "CONTEXTSVC_RATE_LIMIT_MB", "per-key limits", "str", "128/minute",
        "megabytes of request bodies per key, same notation",
    ),
    Variable(
        "CONTEXTSVC_RATE_PACE", "per-key limits", "str", "25/second",
        "past a burst, one key's requests are paced to this one rate, per worker (`off`: none)",
    ),
    Variable(
        "CONTEXTSVC_RATE_BURST", "per-key limits", "int", 50,
        "requests a key may make at once before pacing (0: no pacing)", minimum=0,
    ),
    Variable(
        "CONTEXTSVC_REFUSAL_HOLD_SECONDS", "per-key limits", "int", 1,
        "a connection refused with a 429 is not read again for its `Retry-After`, at most this "
        "long (0: at once)", minimum=0, maximum=60,
    ),
    Variable(
        "CONTEXTSVC_KEEP_THREAD_FREE", "per-key limits", "bool", True,
        "a key never holds every thread of one server worker",
    ),
    Variable(
        "CONTEXTSVC_MAX_CONCURRENT_PER_KEY", "per-key limits", "int", 0,
        "requests in flight per key across all workers (0: no global count; each request then "
        "pays a Redis round trip)", minimum=0,
    ),
    Variable(
        "CONTEXTSVC_MAX_HEAVY_PER_KEY", "per-key limits", "int", 1,
        "requests with a body of `CONTEXTSVC_HEAVY_BODY_BYTES` or more in flight per key (0: no"
        " limit)", minimum=0,
    ),
    Variable(
        "CONTEXTSVC_HEAVY_BODY_BYTES", "per-key limits", "int", 1_000_000,
        "the size from which a body counts as heavy", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_RATE_LIMIT_STORAGE", "per-key limits", "str",
        Derived("`REDIS_URL`, else `memory://`"),
        "where the counts live (without Redis: per process)",
    ),
    Variable(
        "CONTEXTSVC_WEB_THREADS", "per-key limits", "int", 0,
        "web threads per server process, set by `gunicorn.conf.py` from `--threads` (0: "
        "unknown, as under runserver)", minimum=0,
    ),
    Variable(
        "CONTEXTSVC_WEB_KEEPALIVE", "per-key limits", "int", 15,
        "seconds a key served on a worker still counts as there (its keep-alive connection "
        "may be open), set by `gunicorn.conf.py` from `--keep-alive`", minimum=0,
    ),
    Variable(
        "CONTEXTSVC_CONCURRENCY_LEASE_SECONDS", "per-key limits", "int", 300,
        "the most a request's slot outlives a worker killed under it; keep it above the "
        "gunicorn timeout", minimum=1,
    ),
    # --- upstreams (the drop-in proxy) -------------------------------------------------
    Variable(
        "CONTEXTSVC_UPSTREAM_ANTHROPIC_URL", "upstreams", "url", "https://api.anthropic.com",
        "where `/proxy/anthropic` forwards, without the version path: the proxy adds `/v1/…`",
    ),
    Variable(
        "CONTEXTSVC_UPSTREAM_OPENAI_URL", "upstreams", "url", "https://api.openai.com/v1",
        "where `/proxy/openai/v1` forwards, with the version path (`…/v1`): the proxy adds only"
        " `chat/completions`, `responses`, …",
    ),
    Variable(
        "CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY", "upstreams", "str", None,
        "the Anthropic key used for a client that sends its agent key as its API key (managed "
        "credentials)",
    ),
    Variable(
        "CONTEXTSVC_UPSTREAM_OPENAI_API_KEY", "upstreams", "str", None,
        "the OpenAI key used for a client that sends its agent key as its API key",
    ),
    Variable(
        "CONTEXTSVC_UPSTREAM_GEMINI_URL", "upstreams", "url",
        "https://generativelanguage.googleapis.com",
        "where `/proxy/gemini` forwards, without the version path: the proxy adds `/v1beta/…`",
    ),
    Variable(
        "CONTEXTSVC_UPSTREAM_GEMINI_API_KEY", "upstreams", "str", None,
        "the Gemini API key used for a client that sends its agent key as its API key",
    ),
    Variable(
        "CONTEXTSVC_UPSTREAM_CONNECT_TIMEOUT", "upstreams", "int", 10,
        "seconds the proxy waits for upstream to connect", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_UPSTREAM_READ_TIMEOUT", "upstreams", "int", 600,
        "seconds the proxy waits between two chunks of an upstream answer", minimum=1,
    ),
    # --- the proxy process (contextsvc/settings_proxy.py, PostgreSQL only) ---------------
    Variable(
        "CONTEXTSVC_PROXY_DB_POOL_MIN", "proxy", "int", 2,
        "database connections the proxy process keeps open", minimum=0,
    ),
    Variable("CONTEXTSVC_PROXY_DB_POOL_MAX", "proxy", "int", 20, "the most it opens", minimum=1),
    Variable(
        "CONTEXTSVC_PROXY_DB_POOL_TIMEOUT", "proxy", "int", 5,
        "seconds a call waits for a pooled connection", minimum=1,
    ),
)  # fmt: skip
