"""Settings of the operators' sign-in: the lockout (django-axes), mail and password reset.

A group of ``contextsvc.settings``, imported by it (this is not a settings
module of its own); the env helpers fail loudly as everywhere.
"""

from __future__ import annotations

from datetime import timedelta

import limits
from django.core.exceptions import ImproperlyConfigured

from contextsvc.settings_env import env_bool, env_int, env_str

# After this many failed sign-ins for one username from one address, that pair
# is locked out for the cool-off time (another user, or the same user from
# elsewhere, can still sign in). A success clears the count. `manage.py
# axes_reset` (or the admin) unlocks.
AXES_FAILURE_LIMIT = env_int("CONTEXTSVC_LOGIN_FAILURE_LIMIT")
AXES_COOLOFF_TIME = timedelta(minutes=env_int("CONTEXTSVC_LOGIN_COOLOFF_MINUTES"))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# The pair alone let one address try every username in turn (30 usernames x 4
# guesses, unlocked): this many failures from one address, whatever the
# usernames, lock that address out for the same cool-off (contextsvc/accounts.py).
# Above the pair's limit: behind a reverse proxy every client shares the proxy's
# address (REMOTE_ADDR), and a few operators' typos must not lock them all out.
AXES_HANDLER = "contextsvc.accounts.AddressLimitedHandler"
CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT = env_int("CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT")

# Mail: SMTP once EMAIL_HOST is set (or any backend named in EMAIL_BACKEND);
# otherwise messages are only printed to the log (the console backend).
EMAIL_HOST = env_str("EMAIL_HOST") or ""
EMAIL_PORT = env_int("EMAIL_PORT")
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS")
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL")
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT")  # a sign-in page never hangs on it
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL")
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)
# Backends that deliver nothing to anyone.
UNDELIVERED_EMAIL_BACKENDS = (
    "django.core.mail.backends.console.EmailBackend",
    "django.core.mail.backends.dummy.EmailBackend",
    "django.core.mail.backends.locmem.EmailBackend",
)
# Password reset by mail is served only where mail is delivered: without it
# the page would claim a mail was sent that never was. Off: its pages are 404s
# and the login page has no link to it.
CONTEXTSVC_PASSWORD_RESET = EMAIL_BACKEND not in UNDELIVERED_EMAIL_BACKENDS
# Reset mails asked for, per client address and per email address entered
# ("limits" notation): past it a 429, and no mail.
CONTEXTSVC_PASSWORD_RESET_RATE = env_str("CONTEXTSVC_PASSWORD_RESET_RATE")
try:
    limits.parse(CONTEXTSVC_PASSWORD_RESET_RATE)
except ValueError as exc:
    raise ImproperlyConfigured(
        f"CONTEXTSVC_PASSWORD_RESET_RATE={CONTEXTSVC_PASSWORD_RESET_RATE!r} is not a rate "
        f"such as 5/hour: {exc}"
    ) from exc
