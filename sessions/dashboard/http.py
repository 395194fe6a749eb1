"""Shared dashboard plumbing: the typed htmx request, partial detection, operator access."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def is_partial(request: HtmxHttpRequest) -> bool:
    """Whether to render the page's named partial alone."""
    # A history restore after the cache was evicted asks for the whole page.
    return bool(request.htmx) and not request.htmx.history_restore_request


def operator_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Logged-in staff only. An htmx request whose login expired is sent to
    the login page as a whole-page redirect, not a login form swapped into a card."""

    @wraps(view)
    def wrapper(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            if request.htmx:
                path = request.htmx.current_url_abs_path or request.get_full_path()
                return HttpResponseClientRedirect(redirect_to_login(path).url)
            return redirect_to_login(request.get_full_path())
        if not request.user.is_staff:
            raise PermissionDenied("The dashboard is for operators (staff users).")
        return view(request, *args, **kwargs)

    return wrapper
