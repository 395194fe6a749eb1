"""Declarations: mail and the password reset it enables, and the per-address sign-in lock."""

from __future__ import annotations

from .declaration import Derived, Variable

VARIABLES: tuple[Variable, ...] = (
    Variable(
        "CONTEXTSVC_LOGIN_ADDRESS_FAILURE_LIMIT",
        "security",
        "int",
        20,
        "failed dashboard sign-ins from one address, whatever the usernames, before that "
        "address is locked out for the cool-off (above the per-username limit: behind a "
        "reverse proxy every client shares its address)",
        minimum=1,
    ),
    Variable(
        "EMAIL_HOST",
        "mail",
        "str",
        None,
        "SMTP server; set, mail is sent with SMTP and password reset is served",
    ),
    Variable("EMAIL_PORT", "mail", "int", 25, "SMTP port", minimum=1, maximum=65535),
    Variable("EMAIL_HOST_USER", "mail", "str", None, "SMTP user"),
    Variable("EMAIL_HOST_PASSWORD", "mail", "str", None, "SMTP password"),
    Variable("EMAIL_USE_TLS", "mail", "bool", False, "STARTTLS to the SMTP server"),
    Variable("EMAIL_USE_SSL", "mail", "bool", False, "implicit TLS to the SMTP server"),
    Variable(
        "EMAIL_TIMEOUT",
        "mail",
        "int",
        10,
        "seconds an SMTP exchange may take (a sign-in page never hangs on it)",
        minimum=1,
    ),
    Variable("DEFAULT_FROM_EMAIL", "mail", "str", "contextsvc@localhost", "sender of mails"),
    Variable(
        "EMAIL_BACKEND",
        "mail",
        "str",
        Derived("SMTP when `EMAIL_HOST` is set, else the console (mail only logged)"),
        "Django mail backend; password reset is served only with one that delivers (not "
        "the console, dummy or locmem backend)",
    ),
    Variable(
        "CONTEXTSVC_PASSWORD_RESET_RATE",
        "mail",
        "str",
        "5/hour",
        "reset mails asked for, per client address and per email address entered "
        "(`limits` notation); past it a 429 and no mail",
    ),
)
