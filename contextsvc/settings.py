"""contextsvc settings: everything comes from the environment.

With no environment but a SECRET_KEY the service runs on its embedded defaults:
an SQLite file and a filesystem Celery broker under ./var/, the offline
summariser, HTTPS-only cookies and redirects (CONTEXTSVC_PLAIN_HTTP=true for
plain HTTP; bin/run sets it and makes the key). The env helpers
(contextsvc/settings_env.py) fail loudly (ImproperlyConfigured) on values they
cannot parse, so a typo in production is a crash at start-up rather than a
silent default. Celery and compaction (contextsvc/settings_celery.py) and the
operators' sign-in, mail and password reset (contextsvc/settings_auth.py) are
groups of their own, imported below: this stays the one module Django loads.
"""

from __future__ import annotations

import dj_database_url
import limits
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from contextsvc.settings_env import (
    BASE_DIR,
    REDIS_URL,
    VAR_DIR,
    env_bool,
    env_int,
    env_list,
    env_path,
    env_str,
    env_url,
)

# --- security ---------------------------------------------------------------

DEBUG = env_bool("DEBUG")
# Plain HTTP: no redirect to HTTPS, no HSTS, cookies without the Secure flag.
# For the quick start (bin/run sets it: runserver speaks plain HTTP), the test
# suite and a try-out without TLS. Off unless DEBUG, so a deployment is
# HTTPS-only unless it says otherwise; each setting below can still be set alone.
PLAIN_HTTP = env_bool("CONTEXTSVC_PLAIN_HTTP", DEBUG)


_DEV_SECRET_KEY = "contextsvc-insecure-dev-key-change-me"


def _weak_secret_key(key: str | None) -> bool:
    """Django's test for a key `check --deploy` rejects (security.W009), or our old default."""
    return (
        not key
        or key.startswith("django-insecure-")
        or key == _DEV_SECRET_KEY
        or len(key) < 50
        or len(set(key)) < 5
    )


SECRET_KEY = env_str("SECRET_KEY")
if _weak_secret_key(SECRET_KEY):
    if not DEBUG:
        # A known or guessable key lets anyone forge operator sessions and CSRF
        # tokens, so outside DEBUG there is no fallback: stop at start-up.
        raise ImproperlyConfigured(
            "SECRET_KEY is missing or weak: outside DEBUG set SECRET_KEY (or SECRET_KEY_FILE) "
            "to a random value of at least 50 characters, e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))' "
            "(bin/run makes one in var/secret_key)"
        )
    SECRET_KEY = SECRET_KEY or _DEV_SECRET_KEY
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS")
# The origins a browser posts the dashboard's forms from when nothing says
# otherwise: the quick start's own (bin/run and docker-compose pass their PORT).
_PORT = env_int("PORT")
CSRF_TRUSTED_ORIGINS = env_list(
    "CSRF_TRUSTED_ORIGINS", [f"http://localhost:{_PORT}", f"http://127.0.0.1:{_PORT}"]
)

# HTTPS. Behind a TLS proxy, gunicorn marks requests secure from the proxy's
# X-Forwarded-Proto when the proxy's address is in FORWARDED_ALLOW_IPS.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not PLAIN_HTTP)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if PLAIN_HTTP else 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD")
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not PLAIN_HTTP)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not PLAIN_HTTP)

# Content-Security-Policy (django-csp): scripts, styles and everything else
# from this origin only; no inline script and no eval (htmx runs with
# allowEval off, see templates/base.html). Inline style *attributes* stay
# allowed: the budget bar's widths and marker positions are data, set in the
# template. The API's Swagger page (ninja's bundled static files) passes the
# same policy.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "style-src-attr": [UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# --- applications -----------------------------------------------------------

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "ninja",
    "axes",
    "csp",
    "sessions.apps.AgentSessionsConfig",
    "compaction.apps.CompactionConfig",
    "prompting.apps.PromptingConfig",
    "proxy.apps.ProxyConfig",
]

MIDDLEWARE = [
    # Outermost: X-Request-Id on every response; a lost database is a 503.
    "contextsvc.middleware.RequestIdMiddleware",
    # An API JSON body over its cap: a 413 from the headers, the body unread.
    "contextsvc.bodycap.JsonBodyCapMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves /static/ from gunicorn in production (docker-compose) without nginx.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # Django's user and messages, passed by an agent key's API call (it has
    # neither): contextsvc/page_middleware.py.
    "contextsvc.page_middleware.AuthenticationMiddleware",
    "contextsvc.page_middleware.MessageMiddleware",
    # gives back a request's per-key concurrency slot (contextsvc/ratelimit/)
    "contextsvc.ratelimit.RateLimitMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # django-csp, for documents only (JSON answers run no script).
    "contextsvc.middleware.DocumentCSPMiddleware",
    # Last, as its documentation asks: it turns a locked-out sign-in into the
    # lockout page.
    "axes.middleware.AxesMiddleware",
]

# axes first: it refuses a locked-out username/address before the password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "contextsvc.urls"
WSGI_APPLICATION = "contextsvc.wsgi.application"
ASGI_APPLICATION = "contextsvc.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

# --- database ---------------------------------------------------------------

_default_sqlite = f"sqlite:///{VAR_DIR / 'contextsvc.sqlite3'}"
DATABASE_URL = env_str("DATABASE_URL", _default_sqlite)
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
except Exception as exc:  # the library raises several types for malformed URLs
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from exc
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # WAL + a busy timeout so the web process and the worker can share the file.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
else:
    # A health check is one more round trip on every request (~7% of an append);
    # without it a connection broken by a database restart fails one request,
    # after which Django drops it. Turn on where the database restarts often.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = env_bool("DB_CONN_HEALTH_CHECKS")
# The append's fixed statements are prepared on the server once per connection
# (sessions/hotpath.py). Behind PgBouncer in transaction pooling mode, either
# give PgBouncer max_prepared_statements (1.21+) or turn this off.
DB_PREPARED_STATEMENTS = env_bool("DB_PREPARED_STATEMENTS")
if DB_PREPARED_STATEMENTS and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # Django turns psycopg's statement preparing off (None); the ORM's cursors
    # bind on the client and never prepare, so this reaches only hotpath's.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 5
# A context build's record (its ContextCall row and the prompt state's cache
# accounting) waits for the WAL flush like every other commit. false: it does
# not (synchronous_commit off for that transaction alone), ~1 ms less per
# GET /context, and a crash of the database server can lose the last fraction
# of a second of records (never a message). The proxy writes the record once
# upstream answered, so its first byte does not wait either way (bench_proxy:
# added TTFB p50 13.4 / 13.7 ms with the flush, 13.2 / 13.1 without).
DB_BUILD_RECORD_SYNC_COMMIT = env_bool("DB_BUILD_RECORD_SYNC_COMMIT")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- groups: sign-in, mail, password reset (settings_auth); celery, compaction

from contextsvc.settings_auth import *  # noqa: E402,F403
from contextsvc.settings_celery import *  # noqa: E402,F403

# --- auth, i18n, static -----------------------------------------------------

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env_path("STATIC_ROOT", VAR_DIR / "staticfiles")
try:  # whitenoise warns on every start when the folder is missing
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
except OSError:
    pass
# The quick start serves static/ straight from the source folders (no collectstatic);
# production images run collectstatic and whitenoise serves STATIC_ROOT.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Request bodies: a 5 MB file read is an ordinary tool result, so JSON bodies of
# 32 MB are accepted (the tool output cache, docs/concepts/trimming.md#stored-in-full); bigger
# outputs go through the raw upload path.
CONTEXTSVC_MAX_JSON_BODY = env_int("CONTEXTSVC_MAX_JSON_BODY")
CONTEXTSVC_MAX_UPLOAD_BYTES = env_int("CONTEXTSVC_MAX_UPLOAD_BYTES")
DATA_UPLOAD_MAX_MEMORY_SIZE = CONTEXTSVC_MAX_JSON_BODY
# Tool output cache (docs/concepts/trimming.md#stored-in-full): unreferenced outputs older than this
# are collected (manage.py gc_outputs / sessions.tasks.gc_outputs); a grep gives
# up (422) after this long.
CONTEXTSVC_OUTPUT_RETENTION_DAYS = env_int("CONTEXTSVC_OUTPUT_RETENTION_DAYS")
# A ref read or grep (API or built-in tool) answers at most this many bytes of
# JSON and says how to continue (has_more, next_offset, a message). The older
# CONTEXTSVC_SLICE_MAX_BYTES (a cap on the slice text) still sets it when given.
_slice_max = env_int("CONTEXTSVC_SLICE_MAX_BYTES")
CONTEXTSVC_REF_RESPONSE_MAX_BYTES = env_int("CONTEXTSVC_REF_RESPONSE_MAX_BYTES", _slice_max)
CONTEXTSVC_SLICE_MAX_BYTES = CONTEXTSVC_REF_RESPONSE_MAX_BYTES
CONTEXTSVC_GREP_TIME_LIMIT_MS = env_int("CONTEXTSVC_GREP_TIME_LIMIT_MS")
# history_search: a worker indexes a session this many seconds after an append
# (0: only the sweep, a search and a compaction do); a search indexes at most
# this much backlog first; on SQLite it walks at most this many ~2 KiB segments.
CONTEXTSVC_RECALL_INDEX_DELAY = env_int("CONTEXTSVC_RECALL_INDEX_DELAY")
CONTEXTSVC_RECALL_CATCH_UP_BYTES = env_int("CONTEXTSVC_RECALL_CATCH_UP_BYTES")
CONTEXTSVC_RECALL_SCAN_SEGMENTS = env_int("CONTEXTSVC_RECALL_SCAN_SEGMENTS")

# --- contextsvc defaults ----------------------------------------------------

CONTEXT_DEBUG = env_bool("CONTEXT_DEBUG")
CONTEXTSVC_FINAL_REPORT_TOOL = env_str("CONTEXTSVC_FINAL_REPORT_TOOL")
# The task-status tool (docs/concepts/guard.md#report-tools): like the final-report tool it
# is the agent's own machinery and not counted in the schema tokens.
CONTEXTSVC_TASK_STATUS_TOOL = env_str("CONTEXTSVC_TASK_STATUS_TOOL")
CONTEXTSVC_IDEMPOTENCY_TTL_HOURS = env_int("CONTEXTSVC_IDEMPOTENCY_TTL_HOURS")
CONTEXTSVC_MAX_BATCH = env_int("CONTEXTSVC_MAX_BATCH")
# Prompt sections and tool definitions per session: more is a 422
# naming the first item over the limit, and nothing is applied.
CONTEXTSVC_MAX_SECTIONS = env_int("CONTEXTSVC_MAX_SECTIONS")
CONTEXTSVC_MAX_TOOLS = env_int("CONTEXTSVC_MAX_TOOLS")
# An API JSON body past this is a 413 read from its headers (contextsvc/bodycap.py):
# parsing one holds the worker's GIL ~14 ms a megabyte, stalling every other
# key on that worker. Bigger tool outputs go through the raw upload.
CONTEXTSVC_MAX_API_JSON_BYTES = env_int("CONTEXTSVC_MAX_API_JSON_BYTES")
# Characters an append tokenizes exactly per request (~50 ms of a core for real
# text at 256 Ki): a message past what is left is stored with a bounded estimate
# (contextsvc/engine/token_estimate.py, ~4 ms for 30 MB), marked
# token_count_estimated, and a Celery task counts it exactly off the request
# path. 0: every message over one 2 Ki-character sample window is estimated.
CONTEXTSVC_EXACT_TOKEN_CHARS = env_int("CONTEXTSVC_EXACT_TOKEN_CHARS")
# Queue of the sessions' chores: exact counts, recall index ("": the default).
CONTEXTSVC_TOKEN_COUNT_QUEUE = env_str("CONTEXTSVC_TOKEN_COUNT_QUEUE")

# --- per-key limits -----------------------------------------------------------

# No agent key may starve the others (contextsvc/ratelimit/): each key gets at
# most these request rates ("limits" notation: N/second, N/minute, ";" between;
# "off" for none) and at most this many requests in flight (0 for no limit),
# answered 429 + Retry-After past them. An agent calls a few times per LLM call,
# i.e. well under one request a second: 25 a second leaves room for bursts, a small
# fleet on one key and bulk imports. Rate tokens come from Redis in batches: an
# ordinary call pays no round trip (docs/api.md#per-key-limits).
CONTEXTSVC_RATE_LIMIT = env_str("CONTEXTSVC_RATE_LIMIT")
# Megabytes of request bodies per key, same notation: parsing and counting a big
# body costs CPU by the megabyte (4 appends of 30 MB a minute; a 5 MB tool output
# is an ordinary one).
CONTEXTSVC_RATE_LIMIT_MB = env_str("CONTEXTSVC_RATE_LIMIT_MB")
# Past a burst, a key's requests are paced to one steady rate ("limits"
# notation, one rate; "off" or a burst of 0 for none), per worker in process
# memory, free: a window lets a flooding key spend its whole minute in seconds
# (1,500 small appends in 7 s, a thread of every worker). A burst this large
# covers an agent's calls at once.
CONTEXTSVC_RATE_PACE = env_str("CONTEXTSVC_RATE_PACE")
CONTEXTSVC_RATE_BURST = env_int("CONTEXTSVC_RATE_BURST")
# A connection refused with a 429 is not read again before its Retry-After, at
# most this many seconds (0: at once; gunicorn.conf.py's worker class): a
# flooding client that ignores Retry-After sent ~2,000 requests a second, each
# parsed before it could be refused. At most a minute: a held connection
# cannot time out meanwhile.
CONTEXTSVC_REFUSAL_HOLD_SECONDS = env_int("CONTEXTSVC_REFUSAL_HOLD_SECONDS")
for _name in ("CONTEXTSVC_RATE_LIMIT", "CONTEXTSVC_RATE_LIMIT_MB", "CONTEXTSVC_RATE_PACE"):
    _rate = globals()[_name]
    if _rate.strip().lower() not in ("off", "none", "0"):
        try:
            _items = limits.parse_many(_rate)
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"{_name}={_rate!r} is not a rate such as '50/second;1500/minute': {exc}"
            ) from exc
        if _name == "CONTEXTSVC_RATE_PACE" and len(_items) != 1:
            raise ImproperlyConfigured(f"{_name}={_rate!r} must be one rate, such as 25/second")
# A key never holds every thread of one server worker while another key is
# there (served, or within the keep-alive): process memory, free. On by default.
CONTEXTSVC_KEEP_THREAD_FREE = env_bool("CONTEXTSVC_KEEP_THREAD_FREE")
# Requests in flight per key across all workers (0: no global count). Each
# request then pays a Redis round trip (~0.3 ms, a tenth of an append), and the
# per-worker share above already bounds a key to workers x (threads - 1).
CONTEXTSVC_MAX_CONCURRENT_PER_KEY = env_int("CONTEXTSVC_MAX_CONCURRENT_PER_KEY")
# Requests with a body of HEAVY_BODY_BYTES or more in flight per key (0: no
# limit): each costs a core for seconds (a 30 MB body: ~3 s of parsing and
# counting), so one key's uploads take at most this many cores.
CONTEXTSVC_MAX_HEAVY_PER_KEY = env_int("CONTEXTSVC_MAX_HEAVY_PER_KEY")
CONTEXTSVC_HEAVY_BODY_BYTES = env_int("CONTEXTSVC_HEAVY_BODY_BYTES")
# Shared by every worker through Redis; without REDIS_URL, counted per process
# (exact for the quick start's one process; N gunicorn workers allow N times it).
CONTEXTSVC_RATE_LIMIT_STORAGE = env_str("CONTEXTSVC_RATE_LIMIT_STORAGE", REDIS_URL or "memory://")
# Web threads per server process (a key may hold all but one while another key is
# there) and its keep-alive (a key served that recently is still there): set by
# gunicorn.conf.py's post_fork hook; 0 threads = unknown (runserver starts a thread
# per connection, so there is always one for another key).
CONTEXTSVC_WEB_THREADS = env_int("CONTEXTSVC_WEB_THREADS")
CONTEXTSVC_WEB_KEEPALIVE = env_int("CONTEXTSVC_WEB_KEEPALIVE")
# A request's slot outlives a worker killed under it at most this long; keep it
# above the gunicorn timeout, so a slow request never loses its slot.
CONTEXTSVC_CONCURRENCY_LEASE_SECONDS = env_int("CONTEXTSVC_CONCURRENCY_LEASE_SECONDS")

# --- logging ----------------------------------------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL")},
    "loggers": {
        # CONTEXT_DEBUG: each guard evaluation as a JSON line (docs/concepts/guard.md#debug-topics).
        "contextsvc.guard": {"level": "DEBUG" if CONTEXT_DEBUG else "INFO"},
        # its version banner on every start says nothing an operator acts on
        "axes": {"level": "WARNING"},
    },
}

# The drop-in proxy (proxy/): where it forwards, and the provider keys it uses for a
# client that sends its agent key as its provider key (managed credentials).
CONTEXTSVC_UPSTREAM_ANTHROPIC_URL = env_url("CONTEXTSVC_UPSTREAM_ANTHROPIC_URL")
CONTEXTSVC_UPSTREAM_OPENAI_URL = env_url("CONTEXTSVC_UPSTREAM_OPENAI_URL")
CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY = env_str("CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY")
CONTEXTSVC_UPSTREAM_OPENAI_API_KEY = env_str("CONTEXTSVC_UPSTREAM_OPENAI_API_KEY")
CONTEXTSVC_UPSTREAM_GEMINI_URL = env_url("CONTEXTSVC_UPSTREAM_GEMINI_URL")
CONTEXTSVC_UPSTREAM_GEMINI_API_KEY = env_str("CONTEXTSVC_UPSTREAM_GEMINI_API_KEY")
# Seconds the proxy waits for upstream to connect / between two chunks of an answer.
CONTEXTSVC_UPSTREAM_CONNECT_TIMEOUT = env_int("CONTEXTSVC_UPSTREAM_CONNECT_TIMEOUT")
CONTEXTSVC_UPSTREAM_READ_TIMEOUT = env_int("CONTEXTSVC_UPSTREAM_READ_TIMEOUT")
