"""Settings of the proxy process (ASGI): the project's, serving only ``/proxy/``.

The proxy's views are async and need none of the dashboard's middleware
(sessions, CSRF, auth, messages, htmx, CSP, axes). Each sync-only middleware
under ASGI costs a thread hop per request, so this process keeps the two that
are async-capable and routes nothing but the proxy's paths.

Database connections come from a pool. Under ASGI each request runs its
database work in a context of its own, so a persistent connection
(``CONN_MAX_AGE``) is never found again: every proxied call opened a new
PostgreSQL connection (a backend started, the session configured, the
append's prepared statements lost). Pooled, a call takes a warm connection
and gives it back when its database work is done (``views.proxy_call``), so
a stream that waits minutes on upstream holds none.
"""

import copy

from .settings import *  # noqa: F403 - the one configuration, narrowed below
from .settings import DATABASES as _WEB_DATABASES
from .settings_env import env_int

# A copy: importing this module (a test does) must not turn the web settings' own
# dict into a pooled configuration.
DATABASES = copy.deepcopy(_WEB_DATABASES)

ROOT_URLCONF = "contextsvc.urls_proxy"
MIDDLEWARE = [
    "contextsvc.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
]
# No admin and no sign-in here (the web process serves both): without their
# apps, `check --deploy` asks for none of the session, auth, messages and axes
# middleware they need.
INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in ("django.contrib.admin", "axes")]  # noqa: F405
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
# What `check --deploy` still asks, and why this process needs neither: it
# serves JSON and event streams to API clients, never a page a browser could
# frame (X-Frame-Options, security.W002), and every call is authenticated by
# a key in its headers, never by a cookie a forged cross-site form could ride
# (CSRF, security.W003; every proxy view is csrf_exempt in the web process too).
# Either middleware would cost each call a thread hop under ASGI for nothing.
SILENCED_SYSTEM_CHECKS = ["security.W002", "security.W003"]

if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them (Django requires 0)
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env_int("CONTEXTSVC_PROXY_DB_POOL_MIN"),
        "max_size": env_int("CONTEXTSVC_PROXY_DB_POOL_MAX"),
        "timeout": env_int("CONTEXTSVC_PROXY_DB_POOL_TIMEOUT"),
    }
