"""Bearer agent keys for the API, an operator's session for its few operator-only
writes, and the typed request its handlers receive."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from contextsvc.errors import Forbidden
from contextsvc.ratelimit import admit_key, refuse_flooding_key

from .hotpath import session_for_key
from .models import AgentKey, Session, hash_key
from .selectors import is_session_id

# Touch last_used_at at most this often: one write per request would double
# the cost of the append path for a timestamp nobody needs to the second.
LAST_USED_RESOLUTION = timedelta(minutes=1)


IDENTITY_CHARS = 16


def key_identity(token: str) -> str:
    """The per-key limiter's name for the key ``token`` would be (its hash's
    prefix: random, unlike ids reused by a rolled-back test database)."""
    return hash_key(token)[:IDENTITY_CHARS]


class ApiRequest(HttpRequest):
    """An API request once ``AgentKeyAuth`` let it in: what handlers annotate ``request`` with.

    Never instantiated: it declares the attributes authentication sets on
    Django's request.
    """

    auth: AgentKey
    # The session the URL names, loaded with the key in one query (None when
    # the URL names none, or one the key does not own).
    contextsvc_session: Session | None


class AgentKeyAuth(HttpBearer):
    """``Authorization: Bearer <key>``: an active agent key, within its rate limits."""

    def authenticate(self, request: HttpRequest, token: str) -> AgentKey | None:
        request.contextsvc_session = None
        if not token:
            return None
        digest = hash_key(token)
        identity = digest[:IDENTITY_CHARS]  # key_identity(token), the hash not taken again
        # Also refused in front of Django (contextsvc/ratelimit/wsgi.py); here
        # for what does not pass the wrapper (the Django test client), and a flood
        # that the wrapper let in just before this process learnt to refuse it.
        refuse_flooding_key(request, identity)
        key = None
        match = request.resolver_match
        sid = match.kwargs.get("sid") if match else None
        if sid and is_session_id(sid):
            # Nearly every call names a session: fetch it with its owner in the
            # same query as the key check. A miss falls back to the key alone,
            # so a bad key stays a 401 and an unknown session a 404.
            session = session_for_key(sid, digest)
            if session is not None:
                key = session.owner
                request.contextsvc_session = session
        if key is None:
            key = AgentKey.objects.filter(key_hash=digest, revoked_at__isnull=True).first()
        if key is None:
            return None
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
            AgentKey.objects.filter(pk=key.pk).update(last_used_at=now)
        # Per-key limits, counted once the key is known (a bad key stays a 401).
        admit_key(request, identity)
        return key


class OperatorSessionAuth(APIKeyCookie):
    """A staff user's signed-in dashboard session (Django's session cookie).

    The API's operator credential: what writes shared settings (model prices)
    that no agent key may. A write must carry the CSRF token too
    (``X-CSRFToken``), as the dashboard's own forms do, so a page elsewhere
    cannot make an operator's browser write. Without the cookie the next
    credential is tried.
    """

    param_name = settings.SESSION_COOKIE_NAME

    def _get_key(self, request: HttpRequest) -> str | None:
        # The cookie first, CSRF after: a request with none is not an operator's,
        # and goes on to the agent-key check instead of failing CSRF.
        return request.COOKIES.get(self.param_name)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        if not key or not request.user.is_authenticated:
            return None
        if not request.user.is_staff:
            raise Forbidden("Operators only: this user is not staff")
        if request.method not in ("GET", "HEAD", "OPTIONS") and check_csrf(request) is not None:
            raise Forbidden("CSRF check failed: send X-CSRFToken with the csrftoken cookie's value")
        return request.user


class AgentKeyRefused:
    """On an operator-only write: a valid agent key is a 403 (keys are tenants, and
    model prices are every tenant's), a missing or bad one a 401. A plain callable,
    not a security scheme: the operation's documented credential stays the operator's."""

    def __init__(self) -> None:
        self._keys = AgentKeyAuth()

    def __call__(self, request: HttpRequest) -> None:
        if self._keys(request) is not None:
            raise Forbidden(
                "Agent keys cannot change model prices: an operator sets them on the "
                "dashboard's Models & prices page, in the admin, or here when signed in"
            )
