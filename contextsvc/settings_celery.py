"""Celery and compaction settings, imported by ``contextsvc.settings`` (one settings module).

The broker (Redis, or an embedded filesystem broker), task limits and the
periodic chores; then the compaction runs Celery executes: leases, waits,
the summariser and the queue.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from contextsvc.settings_env import (
    REDIS_URL,
    VAR_DIR,
    env_bool,
    env_choice,
    env_int,
    env_str,
    env_url,
)

# --- celery -----------------------------------------------------------------

_celery_dir = VAR_DIR / "celery"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "filesystem://")
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", REDIS_URL)  # job state lives in the DB
if CELERY_BROKER_URL == "filesystem://":
    # Embedded broker: a real `celery worker` process reads these folders, so
    # compaction still runs in the background with no Redis (DESIGN.md).
    for sub in ("out", "processed", "control"):
        (_celery_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_celery_dir / "out"),
        "data_folder_out": str(_celery_dir / "out"),
        "processed_folder": str(_celery_dir / "processed"),
        # broadcast/pidbox files; the default is ./control in the working dir
        "control_folder": str(_celery_dir / "control"),
        "store_processed": False,
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("CONTEXTSVC_TASK_TIME_LIMIT")
CELERY_TASK_SOFT_TIME_LIMIT = max(1, CELERY_TASK_TIME_LIMIT - 30)
# Redis hands an unacked message (acks_late: its worker was killed) to another
# worker after this many seconds. Longer than the time limit, so a task still
# running is never delivered twice, and than a retry's countdown (at most 300 s,
# compaction/tasks.py), which Redis also counts; not an hour, the default.
_visibility_floor = max(CELERY_TASK_TIME_LIMIT, 300) + 1
CONTEXTSVC_BROKER_VISIBILITY_TIMEOUT = env_int(
    "CONTEXTSVC_BROKER_VISIBILITY_TIMEOUT", _visibility_floor + 59
)
if CONTEXTSVC_BROKER_VISIBILITY_TIMEOUT < _visibility_floor:
    raise ImproperlyConfigured(
        f"CONTEXTSVC_BROKER_VISIBILITY_TIMEOUT={CONTEXTSVC_BROKER_VISIBILITY_TIMEOUT} "
        f"must be >= {_visibility_floor}"
    )
if CELERY_BROKER_URL != "filesystem://":
    # Redis, Sentinel and SQS read it; other transports ignore it.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CONTEXTSVC_BROKER_VISIBILITY_TIMEOUT}
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Periodic chores (run `celery -A contextsvc beat`; bin/run embeds it in its
# worker). Each is also a management command for cron.
CELERY_BEAT_SCHEDULE = {
    # re-send compaction runs whose queue message or worker was lost
    "compaction-requeue-stale": {"task": "compaction.requeue_stale", "schedule": 60.0},
    # Idempotency-Key records past CONTEXTSVC_IDEMPOTENCY_TTL_HOURS
    "sessions-prune-idempotency-keys": {
        "task": "sessions.prune_idempotency_keys",
        "schedule": 3600.0,
    },
    # exact token counts whose task was never enqueued (a broker outage at append)
    "sessions-count-estimated-tokens": {
        "task": "sessions.count_estimated_tokens",
        "schedule": 600.0,
    },
    # the recall index (history_search) of sessions that appended since it last ran
    "sessions-recall-index": {"task": "sessions.recall_index", "schedule": 60.0},
    # docs/concepts/trimming.md#garbage-collection: tool outputs nothing references any more
    "sessions-gc-outputs": {"task": "sessions.gc_outputs", "schedule": 86400.0},
}

# --- compaction ---------------------------------------------------------------

# Enqueue a compaction from the append/usage hook when the budget says one is
# due (docs/concepts/compaction.md#check-points); false leaves only explicit ones (POST /compact,
# the compact_context tool, the overflow path).
CONTEXTSVC_AUTO_COMPACT = env_bool("CONTEXTSVC_AUTO_COMPACT")
# Who writes summaries (docs/compaction.md, "Summarisers"): auto — the Anthropic summariser
# for a Claude summary model when it has a key, else the openai one when it is
# configured (a key or a base URL), else the offline summariser —, or one of
# offline, anthropic, openai, gemini (an error when that one is not configured).
# A Gemini summary model with a Gemini key goes to the gemini one before openai.
# policy.compaction.summarizer overrides it per session.
CONTEXTSVC_SUMMARIZER = env_choice("CONTEXTSVC_SUMMARIZER")
# Each summariser's server, key and model. A model is a cheap one of that
# provider by default, not the agent's; ``session`` summarises with the
# session's own model (docs/concepts/compaction.md#summary-model); policy.compaction.model wins over
# both. Anthropic Messages API (official SDK): the key and URL fall back to the SDK's
# own variables; no URL: the SDK's default.
CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY = env_str(
    "CONTEXTSVC_SUMMARIZER_ANTHROPIC_API_KEY", env_str("ANTHROPIC_API_KEY")
)
CONTEXTSVC_SUMMARIZER_ANTHROPIC_BASE_URL = env_url(
    "CONTEXTSVC_SUMMARIZER_ANTHROPIC_BASE_URL", env_url("ANTHROPIC_BASE_URL")
)
CONTEXTSVC_SUMMARIZER_ANTHROPIC_MODEL = env_str("CONTEXTSVC_SUMMARIZER_ANTHROPIC_MODEL")
# Any Chat Completions server (OpenAI, vLLM, Ollama, LiteLLM; official openai
# SDK), configured only by these names — an OPENAI_API_KEY in the environment
# does not turn LLM summaries on. The base URL includes the version path
# (``http://host:8000/v1``); no URL: the SDK's default (OPENAI_BASE_URL, else
# OpenAI's API). A server that needs no key needs only the URL.
CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY = env_str("CONTEXTSVC_SUMMARIZER_OPENAI_API_KEY")
CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL = env_url("CONTEXTSVC_SUMMARIZER_OPENAI_BASE_URL")
CONTEXTSVC_SUMMARIZER_OPENAI_MODEL = env_str("CONTEXTSVC_SUMMARIZER_OPENAI_MODEL")
# Gemini's generateContent (plain httpx): the key falls back to GEMINI_API_KEY, the
# variable Google's SDK and Gemini CLI read; the base URL has no version path
# (the summariser adds /v1beta/models/{model}:generateContent).
CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY = env_str(
    "CONTEXTSVC_SUMMARIZER_GEMINI_API_KEY", env_str("GEMINI_API_KEY")
)
CONTEXTSVC_SUMMARIZER_GEMINI_BASE_URL = env_url("CONTEXTSVC_SUMMARIZER_GEMINI_BASE_URL")
CONTEXTSVC_SUMMARIZER_GEMINI_MODEL = env_str("CONTEXTSVC_SUMMARIZER_GEMINI_MODEL")
# The SDK's own retries of a summary call (429 / 5xx / 529, honouring
# retry-after) before the run's task retries with backoff.
CONTEXTSVC_SUMMARIZER_MAX_RETRIES = env_int("CONTEXTSVC_SUMMARIZER_MAX_RETRIES")
# Seconds per summary call.
CONTEXTSVC_SUMMARIZER_TIMEOUT = env_int("CONTEXTSVC_SUMMARIZER_TIMEOUT")
# Route runs to a dedicated worker pool (`celery worker -Q <queue>`); unset:
# Celery's default queue.
CONTEXTSVC_COMPACTION_QUEUE = env_str("CONTEXTSVC_COMPACTION_QUEUE")
# How long `wait: true`, the compact_context tool and the overflow path wait
# for a run another executor holds.
CONTEXTSVC_COMPACT_WAIT_SECONDS = env_int("CONTEXTSVC_COMPACT_WAIT_SECONDS")
# A compaction run's holder renews a lease this long every third of it while it
# works; a run whose lease lapsed (its worker was killed) is requeued by whoever
# looks at it next — a request, any worker's sweep (every third of a lease), beat.
# 10 s: a killed worker's run is running again within ~15 s; one renewal can be
# late by two beats before a live run looks dead.
CONTEXTSVC_COMPACTION_LEASE_SECONDS = env_int("CONTEXTSVC_COMPACTION_LEASE_SECONDS")
# A run whose holder was lost this many times (counting every claim) is failed,
# the session unchanged, instead of requeued again.
CONTEXTSVC_COMPACTION_MAX_ATTEMPTS = env_int("CONTEXTSVC_COMPACTION_MAX_ATTEMPTS")
# The most GET /context (at block) waits for a compaction another executor
# holds before it answers with the context it has; never for one that stopped.
CONTEXTSVC_CONTEXT_WAIT_SECONDS = env_int("CONTEXTSVC_CONTEXT_WAIT_SECONDS")
