"""Production settings, each in a fresh process with a production-like environment:
`check --deploy` is clean, and the service refuses to start without a real
SECRET_KEY outside DEBUG (no built-in fallback key)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Everything the test run (tests/settings.py, a developer's shell) may have set
# that would make the child less than production-like.
_NOT_INHERITED = (
    "DEBUG",
    "SECRET_KEY",
    "SECRET_KEY_FILE",
    "CONTEXTSVC_PLAIN_HTTP",
    "DJANGO_SETTINGS_MODULE",
    "ALLOWED_HOSTS",
    "DJANGO_ALLOW_ASYNC_UNSAFE",  # set by the browser tests; check --deploy rejects it
)
_NOT_INHERITED_PREFIXES = ("SECURE_", "SESSION_COOKIE_", "CSRF_COOKIE_")


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _NOT_INHERITED and not k.startswith(_NOT_INHERITED_PREFIXES)
    }
    env.update(
        DJANGO_SETTINGS_MODULE="contextsvc.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        CONTEXTSVC_VAR_DIR=str(tmp_path / "var"),
        ALLOWED_HOSTS="contextsvc.example.com",
        LOG_LEVEL="WARNING",
    )
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def a_key() -> str:
    return secrets.token_urlsafe(50)


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    # The key from a file, as docker secrets and bin/run pass it.
    key_file = tmp_path / "secret_key"
    key_file.write_text(a_key() + "\n")
    result = manage(
        production_env(tmp_path, SECRET_KEY_FILE=str(key_file)),
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_warns_over_plain_http(tmp_path):
    """The same check fails where the HTTPS settings are off: the test above can fail."""
    result = manage(
        production_env(tmp_path, SECRET_KEY=a_key(), CONTEXTSVC_PLAIN_HTTP="true"),
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
    )
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr, result.stderr


def test_production_defaults_are_https_only(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, "
        "s.CSRF_COOKIE_SECURE, s.DEBUG)"
    )
    env = production_env(tmp_path, SECRET_KEY=a_key())
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "31536000", "True", "True", "False"]
    # Each can be set alone (a TLS proxy that redirects itself, say).
    env["SECURE_SSL_REDIRECT"] = "false"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.stdout.split() == ["False", "31536000", "True", "True", "False"]


@pytest.mark.parametrize(
    "secret",
    [
        pytest.param({}, id="unset"),
        pytest.param({"SECRET_KEY": ""}, id="empty"),
        pytest.param({"SECRET_KEY": "contextsvc-insecure-dev-key-change-me"}, id="old-default"),
        pytest.param({"SECRET_KEY": "short-key"}, id="short"),
        pytest.param({"SECRET_KEY": "django-insecure-" + "x1y2z3" * 10}, id="django-insecure"),
    ],
)
def test_outside_debug_the_service_refuses_to_start_without_a_real_secret_key(tmp_path, secret):
    # What gunicorn loads first (docker-compose's web).
    cmd = [sys.executable, "-c", "import contextsvc.wsgi"]
    env = production_env(tmp_path, **secret)
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is missing or weak" in result.stderr, result.stderr
    assert "SECRET_KEY_FILE" in result.stderr  # says how to fix it


def test_manage_py_refuses_too(tmp_path):
    result = manage(production_env(tmp_path), "migrate", "--noinput")
    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is missing or weak" in result.stderr
    assert not (tmp_path / "db.sqlite3").exists() or (tmp_path / "db.sqlite3").stat().st_size == 0


def test_an_unreadable_secret_key_file_is_a_clear_error(tmp_path):
    env = production_env(tmp_path, SECRET_KEY_FILE=str(tmp_path / "missing"))
    result = manage(env, "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY_FILE=" in result.stderr


def test_debug_still_starts_without_a_key(tmp_path):
    result = manage(production_env(tmp_path, DEBUG="true"), "check")
    assert result.returncode == 0, result.stderr


def test_check_deploy_is_clean_with_the_proxy_process_settings(tmp_path):
    env = production_env(tmp_path, SECRET_KEY=a_key())
    result = manage(
        env,
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        "--settings",
        "contextsvc.settings_proxy",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (2 silenced)" in result.stdout
    # Only the two page checks are silenced there (the reasons are in the module), and
    # none in the web process's settings.
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(sorted(s.SILENCED_SYSTEM_CHECKS))"
    )
    for module, silenced in (
        ("contextsvc.settings_proxy", "['security.W002', 'security.W003']"),
        ("contextsvc.settings", "[]"),
    ):
        env["DJANGO_SETTINGS_MODULE"] = module
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert result.stdout.strip() == silenced, result.stderr
