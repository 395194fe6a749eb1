"""Settings of the proxy process (ASGI): the project's, serving only ``/proxy/``.

The proxy's views are async and need none of the dashboard's middleware
(sessions, CSRF, auth, messages, htmx, CSP, axes). Each sync-only middleware
under ASGI costs a thread hop per request, so this process keeps the two that
are async-capable and routes nothing but the proxy's paths.
"""

from .settings import *  # noqa: F403 - the one configuration, narrowed below

ROOT_URLCONF = "contextsvc.urls_proxy"
MIDDLEWARE = [
    "contextsvc.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
]
