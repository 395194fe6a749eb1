"""Operators' accounts: sign-in with a lockout per address as well as per
username, and password reset only where mail is delivered, throttled.

The URLs under ``/accounts/`` are Django's own views (``django.contrib.auth.urls``)
with two changes: the password reset pages are 404s unless
``CONTEXTSVC_PASSWORD_RESET`` (mail configured: contextsvc/settings_auth.py),
and asking for a reset mail is limited per client address and per email
address entered (``CONTEXTSVC_PASSWORD_RESET_RATE``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import limits
from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import views
from django.db.models import Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import path
from django.utils import timezone
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

logger = logging.getLogger(__name__)


class AddressLimitedHandler(AxesDatabaseHandler):
    """django-axes' database handler, plus a limit per client address.

    axes locks a (username, address) pair after ``AXES_FAILURE_LIMIT``
    failures; one address could still try every username in turn. This also
    locks an address once its failures across all usernames reach
    ``CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT`` within the cool-off, on the same
    records (``AccessAttempt``: ``axes_reset_ip`` and ``axes_reset`` unlock it).
    """

    def address_failures(self, request: HttpRequest) -> int:
        since = timezone.now() - settings.AXES_COOLOFF_TIME
        attempts = AccessAttempt.objects.filter(
            ip_address=request.axes_ip_address, attempt_time__gte=since
        )
        return attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0

    def address_locked(self, request: HttpRequest) -> bool:
        locked = self.address_failures(request) >= settings.CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT
        if locked:
            request.contextsvc_address_locked = True  # the lockout page says which lock
        return locked

    def is_locked(self, request: HttpRequest, credentials: dict | None = None) -> bool:
        if super().is_locked(request, credentials):
            return True
        return not self.is_whitelisted(request, credentials) and self.address_locked(request)

    def user_login_failed(
        self, sender: Any, credentials: dict, request: HttpRequest | None = None, **kwargs: Any
    ) -> None:
        super().user_login_failed(sender, credentials, request, **kwargs)
        if request is None or request.axes_locked_out or self.is_whitelisted(request, credentials):
            return
        if self.address_locked(request):
            logger.warning("locking out address %s after failed sign-ins", request.axes_ip_address)
            request.axes_locked_out = True
            request.axes_credentials = credentials
            user_locked_out.send(
                "axes",
                request=request,
                username=credentials.get(settings.AXES_USERNAME_FORM_FIELD),
                ip_address=request.axes_ip_address,
            )


# --- password reset -----------------------------------------------------------------


@lru_cache(maxsize=4)
def _reset_limiter(storage_uri: str, rate: str) -> tuple[MovingWindowRateLimiter, Any]:
    return MovingWindowRateLimiter(storage_from_string(storage_uri)), limits.parse(rate)


def reset_allowed(request: HttpRequest, email: str) -> bool:
    """Count a reset mail asked for; False when the client's address or the
    email address entered is past ``CONTEXTSVC_PASSWORD_RESET_RATE``."""
    limiter, rate = _reset_limiter(
        settings.CONTEXTSVC_RATE_LIMIT_STORAGE, settings.CONTEXTSVC_PASSWORD_RESET_RATE
    )
    address = request.META.get("REMOTE_ADDR", "")
    try:
        return limiter.hit(rate, "password-reset-address", address) and limiter.hit(
            rate, "password-reset-email", email.strip().lower()
        )
    except Exception:  # the storage's own errors (Redis down) vary by backend
        # As the per-key limits: a limit must not become an outage.
        logger.warning("password reset throttle unavailable; allowing", exc_info=True)
        return True


class ThrottledPasswordResetView(views.PasswordResetView):
    """Django's view; a request past the rate is the form again with a 429, no mail."""

    def form_valid(self, form: Any) -> HttpResponse:
        if reset_allowed(self.request, form.cleaned_data["email"]):
            return super().form_valid(form)
        form.add_error(
            None,
            "Too many password reset requests from your address or for this email "
            "address. Try again later.",
        )
        response = self.form_invalid(form)
        response.status_code = 429
        return response


def when_reset_enabled(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A reset page that does not exist (404) while password reset is off."""

    def gated(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.CONTEXTSVC_PASSWORD_RESET:
            raise Http404("Password reset is off: no mail is configured")
        return view(request, *args, **kwargs)

    return gated


class SignInView(views.LoginView):
    """Django's login page, told whether to offer password reset."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["password_reset_enabled"] = settings.CONTEXTSVC_PASSWORD_RESET
        return context


urlpatterns = [
    path("login/", SignInView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("password_change/", views.PasswordChangeView.as_view(), name="password_change"),
    path(
        "password_change/done/",
        views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path(
        "password_reset/",
        when_reset_enabled(ThrottledPasswordResetView.as_view()),
        name="password_reset",
    ),
    path(
        "password_reset/done/",
        when_reset_enabled(views.PasswordResetDoneView.as_view()),
        name="password_reset_done",
    ),
    path(
        "reset/<uidb64>/<token>/",
        when_reset_enabled(views.PasswordResetConfirmView.as_view()),
        name="password_reset_confirm",
    ),
    path(
        "reset/done/",
        when_reset_enabled(views.PasswordResetCompleteView.as_view()),
        name="password_reset_complete",
    ),
]
