"""The middleware that only pages need, passed by an agent's API call.

An agent's call to ``/api/`` carries its bearer key and no session cookie: it
has no session, no signed-in user, no flash messages, no htmx request and no
static file to find. Yet the user and message middlewares did their work on
every such call (a lazy user, a message store made and read back on the way
out: ~20 µs of an append's ~1 ms of Python, measured in process). The
subclasses here pass such a call straight on; everything else (pages, the
API's docs, a call without a key, an operator's signed-in API write, which
carries the session cookie: ``sessions/auth.py``) goes through them as before.
The others cost little already (static files, htmx), or are named in Django's
deploy checks (the session's: its cookie warnings).

The security middlewares are not among them: host validation, HTTPS redirect
and headers (``SecurityMiddleware``, ``CommonMiddleware``), X-Frame-Options,
CSRF, the CSP (which leaves JSON answers alone itself) and axes run for
every request, and Django's and axes' system checks still find them by name.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.http import HttpRequest

API_PREFIX = "/api/"


def is_key_call(request: HttpRequest) -> bool:
    """An API call made with a bearer key and no session cookie: no page
    middleware has anything to do for it."""
    meta = request.META
    if not request.path_info.startswith(API_PREFIX) or "HTTP_AUTHORIZATION" not in meta:
        return False
    return "HTTP_COOKIE" not in meta or settings.SESSION_COOKIE_NAME not in request.COOKIES


class AuthenticationMiddleware(auth.AuthenticationMiddleware):
    # Under ASGI ``get_response`` returns a coroutine, as ``__acall__`` would.
    def __call__(self, request: HttpRequest) -> Any:
        if is_key_call(request):
            return self.get_response(request)
        return super().__call__(request)


class MessageMiddleware(messages.MessageMiddleware):
    def __call__(self, request: HttpRequest) -> Any:
        if is_key_call(request):
            return self.get_response(request)
        return super().__call__(request)
