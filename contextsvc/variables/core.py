"""Declared environment variables: the service, security, database, broker, web
server, quick start and development groups (see contextsvc/variables/declaration.py)."""

from __future__ import annotations

from .declaration import Derived, Variable

VARIABLES = (
    # --- service ----------------------------------------------------------------
    Variable(
        "DEBUG", "service", "bool", False,
        "Django's debug pages; also the default of `CONTEXTSVC_PLAIN_HTTP`",
    ),
    Variable("LOG_LEVEL", "service", "str", "INFO", "root log level"),
    Variable(
        "CONTEXT_DEBUG", "service", "bool", False,
        "log every guard evaluation as one JSON line (topics `context-guard/evaluate`, "
        "`…/evaluate-target`, `…/provider-eval`, `…/enforce`) on logger `contextsvc.guard`",
    ),
    Variable(
        "CONTEXTSVC_VAR_DIR", "service", "path", Derived("`./var` in the checkout"),
        "the service's own files: the SQLite database, the filesystem broker, the quick "
        "start's secret key, demo key and logs",
    ),
    Variable(
        "STATIC_ROOT", "service", "path", Derived("`staticfiles` in `CONTEXTSVC_VAR_DIR`"),
        "where `collectstatic` puts the static files whitenoise serves in production",
    ),
    Variable(
        "DJANGO_SETTINGS_MODULE", "service", "str", "contextsvc.settings",
        "the settings module; the ASGI entry point (the proxy process) uses "
        "`contextsvc.settings_proxy` unless another is named",
    ),
    Variable(
        "OTEL_EXPORTER_OTLP_ENDPOINT", "service", "str", None,
        "OpenTelemetry on, exporting there ([Operations](operations.md)); the SDK reads "
        "the other `OTEL_*` variables itself",
    ),
    Variable(
        "CONTEXTSVC_OTEL", "service", "bool", False,
        "OpenTelemetry on without an OTLP endpoint (the SDK's defaults)",
    ),
    # --- security ---------------------------------------------------------------
    Variable(
        "SECRET_KEY", "security", "str", None,
        "required outside `DEBUG`: at least 50 random characters (`bin/run` makes one in "
        "`var/secret_key`); a missing or weak key stops the service at start",
    ),
    Variable(
        "ALLOWED_HOSTS", "security", "list", ["127.0.0.1", "localhost", "[::1]", "testserver"],
        "host names the service answers to",
    ),
    Variable(
        "CSRF_TRUSTED_ORIGINS", "security", "list",
        Derived("`http://localhost:$PORT`, `http://127.0.0.1:$PORT`"),
        "origins the dashboard's forms may post from (the public origin behind a proxy)",
    ),
    Variable(
        "CONTEXTSVC_PLAIN_HTTP", "security", "bool", Derived("`DEBUG`"),
        "turn off the HTTPS redirect, HSTS and Secure cookies (`bin/run` and the tests set it)",
    ),
    Variable(
        "SECURE_SSL_REDIRECT", "security", "bool", Derived("on; off under plain HTTP"),
        "redirect plain HTTP to HTTPS",
    ),
    Variable(
        "SECURE_HSTS_SECONDS", "security", "int", Derived("31536000 (a year); 0 under plain HTTP"),
        "HSTS max-age", minimum=0,
    ),
    Variable("SECURE_HSTS_INCLUDE_SUBDOMAINS", "security", "bool", True, "HSTS for subdomains too"),
    Variable("SECURE_HSTS_PRELOAD", "security", "bool", True, "HSTS `preload`"),
    Variable(
        "SESSION_COOKIE_SECURE", "security", "bool", Derived("on; off under plain HTTP"),
        "the session cookie over HTTPS only",
    ),
    Variable(
        "CSRF_COOKIE_SECURE", "security", "bool", Derived("on; off under plain HTTP"),
        "the CSRF cookie over HTTPS only",
    ),
    Variable(
        "CONTEXTSVC_LOGIN_FAILURE_LIMIT", "security", "int", 5,
        "failed dashboard sign-ins of one username from one address before that pair is locked out",
        minimum=1,
    ),
    Variable(
        "CONTEXTSVC_LOGIN_COOLOFF_MINUTES", "security", "int", 15,
        "how long a lockout lasts", minimum=1,
    ),
    # --- database ---------------------------------------------------------------
    Variable(
        "DATABASE_URL", "database", "str",
        Derived("`sqlite:///` + `contextsvc.sqlite3` in `CONTEXTSVC_VAR_DIR`"),
        "`postgres://user:pass@host:5432/name` in production",
    ),
    Variable(
        "DB_CONN_HEALTH_CHECKS", "database", "bool", False,
        "check a pooled connection before each request (one more round trip); without it a "
        "lost connection costs the one request that finds it a 503",
    ),
    Variable(
        "DB_PREPARED_STATEMENTS", "database", "bool", True,
        "prepare the append's fixed statements on PostgreSQL once per connection; turn off "
        "behind PgBouncer in transaction pooling mode unless it has "
        "`max_prepared_statements` (1.21+)",
    ),
    Variable(
        "DB_BUILD_RECORD_SYNC_COMMIT", "database", "bool", True,
        "a context build's record (its `ContextCall` and the prompt state's cache accounting) "
        "waits for the WAL flush like every commit; `false`: it does not (`synchronous_commit` "
        "off for that transaction alone), about a millisecond less per `GET /context`, and a "
        "crash of the database server can lose the last fraction of a second of records "
        "(never a message)",
    ),
    # --- broker -----------------------------------------------------------------
    Variable(
        "REDIS_URL", "broker", "str", None,
        "Celery's broker and result backend and the per-key limits' counters; unset: a "
        "filesystem broker in `CONTEXTSVC_VAR_DIR/celery/` and counts per process",
    ),
    Variable(
        "CELERY_BROKER_URL", "broker", "str", Derived("`REDIS_URL`, else `filesystem://`"),
        "the broker alone",
    ),
    Variable(
        "CELERY_RESULT_BACKEND", "broker", "str", Derived("`REDIS_URL`"),
        "the result backend alone (job state lives in the database)",
    ),
    Variable(
        "CONTEXTSVC_TASK_TIME_LIMIT", "broker", "int", 600,
        "seconds a task may run before the worker kills it (the soft limit is 30 s earlier)",
        minimum=1,
    ),
    Variable(
        "CONTEXTSVC_BROKER_VISIBILITY_TIMEOUT", "broker", "int",
        Derived("the task time limit (at least 300) + 60"),
        "seconds before Redis hands a task whose worker died to another worker; at least the "
        "task time limit (or 300) + 1, so a running task is never delivered twice",
    ),
    Variable(
        "CONTEXTSVC_TOKEN_COUNT_QUEUE", "broker", "str", "",
        "queue of the sessions' chores (exact token counts, the recall index; "
        "`celery worker -Q <queue>`); empty: Celery's default queue",
    ),
    Variable(
        "CONTEXTSVC_COMPACTION_QUEUE", "broker", "str", None,
        "queue of compaction runs, for a dedicated worker pool; unset: Celery's default queue",
    ),
    # --- web server (gunicorn.conf.py; command-line flags and GUNICORN_CMD_ARGS win) ----
    Variable("GUNICORN_BIND", "server", "str", "127.0.0.1:8000", "address gunicorn listens on"),
    Variable(
        "WEB_CONCURRENCY", "server", "int", Derived("2 × CPU cores"),
        "gunicorn worker processes", minimum=1,
    ),
    Variable("GUNICORN_THREADS", "server", "int", 2, "threads per worker process", minimum=1),
    Variable(
        "GUNICORN_KEEPALIVE", "server", "int", 15,
        "seconds an idle keep-alive connection stays open", minimum=0,
    ),
    Variable(
        "GUNICORN_TIMEOUT", "server", "int", 120,
        "seconds a request may take before its worker is restarted", minimum=1,
    ),
    Variable(
        "GUNICORN_DEFER_ACCEPT", "server", "int", 5,
        "a new connection reaches a worker once its first bytes arrived, or after this many "
        "seconds (Linux; 0: at once)", minimum=0,
    ),
    Variable(
        "FORWARDED_ALLOW_IPS", "server", "list", Derived("`127.0.0.1,::1` (docker-compose)"),
        "read by gunicorn itself: the TLS proxy addresses whose `X-Forwarded-Proto` it trusts",
    ),
    # --- quick start (bin/run, bin/setup, docker-compose.yml) -------------------------
    Variable(
        "HOST", "quick start", "str", "127.0.0.1",
        "`bin/run`: address of the web server and the proxy (`0.0.0.0`: reachable from other "
        "machines)",
    ),
    Variable(
        "PORT", "quick start", "int", 8000,
        "`bin/run` and docker-compose: the web server's port (API, dashboard); "
        "`CSRF_TRUSTED_ORIGINS` follows it", minimum=1, maximum=65535,
    ),
    Variable(
        "CONTEXTSVC_PROXY_PORT", "quick start", "int", 8001,
        "`bin/run` and docker-compose: the drop-in proxy's port", minimum=1, maximum=65535,
    ),
    Variable("CONTEXTSVC_DEMO_USER", "quick start", "str", "operator", "the demo's operator login"),
    Variable(
        "CONTEXTSVC_DEMO_PASSWORD", "quick start", "str", "contextsvc-demo",
        "the demo operator's password",
    ),
    Variable(
        "CONTEXTSVC_KEY", "quick start", "str", Derived("printed by `bin/run`"),
        "an agent key in your shell, which the examples in the docs send (`export` it)",
    ),
    Variable(
        "CONTEXTSVC_INSTALLER", "quick start", "choice", "uv",
        "`bin/setup`'s package installer", choices=("uv", "pip"),
    ),
    Variable(
        "PYTHON", "quick start", "str", "python3",
        "`bin/setup`: the interpreter of a new `.venv` (3.11+)",
    ),
    Variable(
        "POSTGRES_PASSWORD", "quick start", "str", "contextsvc",
        "docker-compose: the PostgreSQL password",
    ),
    # --- development (tests and benchmarks) ----------------------------------------------
    Variable(
        "CI", "development", "bool", False,
        "in CI nothing may skip: a missing service, browser or agent CLI fails",
    ),
    Variable(
        "CONTEXTSVC_SHARED", "development", "path", Derived("`../shared` beside the checkout"),
        "the team's shared folder (specs, recorded workloads)",
    ),
    Variable(
        "CONTEXTSVC_AGENTS", "development", "bool", Derived("true in CI, else false"),
        "`bin/test` installs the agent CLIs (Claude Code, Codex, Gemini CLI, opencode; ~1.3 GB from npm) and runs "
        "their tests (`bin/test --agents`)",
    ),
    Variable(
        "CONTEXTSVC_TEST_WORKERS", "development", "str", "auto",
        "pytest-xdist workers of `bin/test` (`auto`: one per core; `1`: one process)",
    ),
    Variable(
        "CONTEXTSVC_DOCS_SCREENSHOTS", "development", "bool", False,
        "the browser tests save the dashboard's pictures to docs/img (`bin/docs screenshots`)",
    ),
    Variable(
        "CONTEXTSVC_CHROMIUM", "development", "path", "/usr/bin/chromium",
        "the browser of the dashboard's browser tests",
    ),
    Variable(
        "CONTEXTSVC_AGENTS_BIN", "development", "path", Derived("`tests/agents/node_modules/.bin`"),
        "where the agent CLIs (Claude Code, Codex, Gemini CLI, opencode) of the live proxy tests are",
    ),
    Variable(
        "CONTEXTSVC_CI_TIMEOUT", "development", "int", 1140,
        "`.ci/run`: seconds the whole CI run may take", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_FUZZ_SECONDS", "development", "int", 100,
        "the contract fuzz test's time budget", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_FUZZ_EXAMPLES", "development", "int", 25,
        "examples per operation of the contract fuzz test", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_PROXY_FUZZ_EXAMPLES", "development", "int", Derived("5000 in CI, else 700"),
        "cases per endpoint of the proxy's fuzz test (four endpoints)", minimum=1,
    ),
    Variable(
        "CONTEXTSVC_FUZZ_ARGS", "development", "str", "",
        "extra arguments of the contract fuzzer",
    ),
    Variable(
        "CONTEXTSVC_FUZZ_IDS", "development", "str", "{}",
        "(set by the fuzz test for its hooks) the ids of the objects it made, as JSON",
    ),
)  # fmt: skip
