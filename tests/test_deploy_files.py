"""The deploy and run files: docker-compose.yml, Dockerfile, .ci/run, bin/*.

No Docker engine runs on these machines (DESIGN.md), so docker-compose.yml is
checked by parsing it; `.ci/run` is run for real against a stub bin/test.
No database needed.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["bin/setup", "bin/run", "bin/test", "bin/manage", ".ci/run"]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _service(name: str) -> dict:
    return _compose()["services"][name]


def _command(service: dict) -> str:
    command = service.get("command", "")
    return " ".join(command) if isinstance(command, list) else str(command)


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def _build_context(service: dict) -> str | None:
    build = service.get("build")
    if isinstance(build, dict):
        return build.get("context", ".")
    return build


# --- docker-compose.yml -------------------------------------------------------


def test_compose_has_the_four_services():
    assert {"postgres", "redis", "web", "worker"} <= set(_compose()["services"])


def test_postgres_service_is_postgres_16_with_healthcheck_and_volume():
    compose = _compose()
    pg = compose["services"]["postgres"]
    assert pg["image"].startswith("postgres:16")
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    volumes = [str(v) for v in pg.get("volumes", [])]
    data_volume = [v for v in volumes if v.split(":")[1] == "/var/lib/postgresql/data"]
    assert data_volume, volumes
    assert data_volume[0].split(":")[0] in (compose.get("volumes") or {})
    env = _env(pg)
    assert env["POSTGRES_DB"] and env["POSTGRES_USER"] and env["POSTGRES_PASSWORD"]


def test_redis_service_is_redis_7_with_healthcheck():
    redis = _service("redis")
    assert redis["image"].startswith("redis:7")
    assert "ping" in " ".join(redis["healthcheck"]["test"])


def test_web_and_worker_share_one_image_built_here():
    web, worker = _service("web"), _service("worker")
    assert _build_context(web) == "."
    assert _build_context(worker) == "."
    assert web.get("image") == worker.get("image")


def test_web_migrates_then_runs_gunicorn_with_four_workers():
    command = _command(_service("web"))
    assert "migrate --noinput" in command
    assert "gunicorn contextsvc.wsgi:application" in command
    assert command.index("migrate") < command.index("gunicorn")
    assert "--bind 0.0.0.0:8000" in command
    assert "--workers 4" in command
    assert "8000" in " ".join(str(p) for p in _service("web").get("ports", []))


def test_worker_runs_celery():
    assert _command(_service("worker")).startswith("celery -A contextsvc worker")


def test_beat_runs_the_periodic_chores():
    assert _command(_service("beat")).startswith("celery -A contextsvc beat")


@pytest.mark.parametrize("name", ["web", "worker", "beat"])
def test_app_services_wire_the_environment(name):
    compose = _compose()
    env = _env(compose["services"][name])
    assert env["DATABASE_URL"].startswith("postgres://")
    assert "@postgres:5432/" in env["DATABASE_URL"]
    pg_env = _env(compose["services"]["postgres"])
    assert env["DATABASE_URL"].endswith("/" + pg_env["POSTGRES_DB"])
    assert env["REDIS_URL"].startswith("redis://redis:6379")
    assert "${SECRET_KEY" in env["SECRET_KEY"]
    assert "${ANTHROPIC_API_KEY" in env["ANTHROPIC_API_KEY"]
    # No fallback key outside DEBUG, and HTTPS-only unless the operator says otherwise.
    assert env["DEBUG"] == "false"
    assert "CONTEXTSVC_REQUIRE_SECRET_KEY" not in env  # the settings always require it now
    assert env["CONTEXTSVC_PLAIN_HTTP"] == "${CONTEXTSVC_PLAIN_HTTP:-false}"


@pytest.mark.parametrize("name", ["web", "worker", "beat"])
def test_app_services_wait_for_healthy_postgres_and_redis(name):
    depends_on = _service(name)["depends_on"]
    assert depends_on["postgres"]["condition"] == "service_healthy"
    assert depends_on["redis"]["condition"] == "service_healthy"


@pytest.mark.needs_compose
def test_compose_file_validates_with_docker_compose(tmp_path):
    # `config` parses and validates without an engine.
    result = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# --- Dockerfile ---------------------------------------------------------------


def test_dockerfile_builds_the_service_image():
    text = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert "pip install ." in text
    assert "collectstatic --noinput" in text
    # htmx comes from the npm package, through the same lock file as bin/setup.
    assert "npm ci" in text
    assert "package-lock.json" in text
    assert "node_modules/htmx.org/dist/htmx.min.js" in text
    assert "static/vendor/htmx.min.js" in text


def test_dockerfile_copies_every_project_app_and_the_gunicorn_settings():
    from django.conf import settings

    text = (ROOT / "Dockerfile").read_text()
    copied = set()
    for line in text.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            copied.update(line.split()[1:-1])
    apps = {app.split(".")[0] for app in settings.INSTALLED_APPS}
    local = {"contextsvc"} | {app for app in apps if (ROOT / app).is_dir()}
    assert local >= {"sessions", "compaction", "prompting"}
    assert local <= copied, f"not copied into the image: {sorted(local - copied)}"
    assert "gunicorn.conf.py" in copied


# --- .ci/run --------------------------------------------------------------------


def test_ci_run_text_points_at_local_services_and_bin_test():
    text = (ROOT / ".ci/run").read_text()
    assert "DATABASE_URL=" in text and "postgres://postgres@127.0.0.1:5432/" in text
    assert "REDIS_URL=" in text and "redis://127.0.0.1:6379/" in text
    assert "CI=true" in text
    assert "bin/test" in text


def _fake_repo_with_stub_test(tmp_path: Path, exit_code: int) -> Path:
    (tmp_path / ".ci").mkdir()
    (tmp_path / "bin").mkdir()
    shutil.copy(ROOT / ".ci/run", tmp_path / ".ci/run")
    stub = tmp_path / "bin/test"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        'printf \'{"ci": "%s", "db": "%s", "redis": "%s", "args": "%s"}\\n\' '
        '"$CI" "$DATABASE_URL" "$REDIS_URL" "$*"\n'
        f"exit {exit_code}\n"
    )
    stub.chmod(0o755)
    return tmp_path


def _run_ci(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "DATABASE_URL", "REDIS_URL")}
    return subprocess.run(
        ["bash", str(repo / ".ci/run"), *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ci_run_exports_local_services_and_calls_bin_test(tmp_path):
    repo = _fake_repo_with_stub_test(tmp_path, 0)
    result = _run_ci(repo, "-k", "x")
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {
        "ci": "true",
        "db": "postgres://postgres@127.0.0.1:5432/contextsvc",
        "redis": "redis://127.0.0.1:6379/0",
        "args": "-k x",
    }


def test_ci_run_keeps_urls_already_set_and_passes_the_exit_code_through(tmp_path):
    repo = _fake_repo_with_stub_test(tmp_path, 3)
    result = _run_ci(
        repo, DATABASE_URL="postgres://u@127.0.0.1:5433/x", REDIS_URL="redis://127.0.0.1:1/1"
    )
    assert result.returncode == 3
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["db"] == "postgres://u@127.0.0.1:5433/x"
    assert seen["redis"] == "redis://127.0.0.1:1/1"


# --- bin/* ----------------------------------------------------------------------


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_are_strict_executable_bash(script):
    path = ROOT / script
    text = path.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert path.stat().st_mode & stat.S_IXUSR, f"{script} is not executable"
    subprocess.run(["bash", "-n", str(path)], check=True)


@pytest.mark.parametrize("module", ["anthropic", "openai", "tiktoken", "django", "celery"])
def test_setup_leaves_bytecode_for_what_every_process_imports(module):
    """Where PYTHONDONTWRITEBYTECODE is set, nothing else writes it: without it
    each process (and each prefork child) compiles the SDKs from source again."""
    source = Path(importlib.import_module(module).__file__)
    cached = Path(importlib.util.cache_from_source(str(source)))
    assert cached.is_file(), f"no bytecode for {source}"
    header = cached.read_bytes()[:16]
    if int.from_bytes(header[4:8], "little") == 0:
        # Timestamp bytecode holds the source's mtime: another version's would be recompiled.
        assert int.from_bytes(header[8:12], "little") == int(source.stat().st_mtime) & 0xFFFFFFFF
    else:
        # Hash-based (compileall under SOURCE_DATE_EPOCH): the source's hash.
        assert header[8:16] == importlib.util.source_hash(source.read_bytes())


def test_setup_vendors_htmx_from_the_npm_package():
    text = (ROOT / "bin/setup").read_text()
    assert "npm ci" in text
    assert "HTMX_SRC=node_modules/htmx.org/dist/htmx.min.js" in text
    assert "HTMX_DST=static/vendor/htmx.min.js" in text
    assert 'cp "$HTMX_SRC" "$HTMX_DST"' in text
    package = json.loads((ROOT / "package.json").read_text())
    assert package["dependencies"]["htmx.org"].lstrip("^~").startswith("2.")
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/htmx.org"]["version"].startswith("2.")


def test_vendored_htmx_is_never_committed():
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "static/vendor/" in ignored
    assert "node_modules" in ignored  # the folder, or a symlink to a shared install
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "ls-files", "--", "static/vendor", "node_modules"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert tracked == ""


def test_test_script_never_downloads_browsers_and_fails_empty_runs_in_ci():
    text = (ROOT / "bin/test").read_text()
    assert "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1" in text
    assert "CONTEXTSVC_CHROMIUM" in text and "/usr/bin/chromium" in text
    assert "playwright install" not in text
    assert "rc == 5" in text
    assert "python -m pytest" in text


# --- gunicorn.conf.py -------------------------------------------------------------


def test_gunicorn_serves_many_requests_over_one_keep_alive_connection(tmp_path):
    """The project's gunicorn settings keep an agent's connection open between
    calls (the sync worker would close it after every response)."""
    import http.client
    import socket
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DEBUG": "false",
        "WEB_CONCURRENCY": "1",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "contextsvc.wsgi:application",
            "-b",
            f"127.0.0.1:{port}",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        deadline = time.monotonic() + 30
        while True:
            try:
                conn.connect()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
        local_port = conn.sock.getsockname()[1]
        for _ in range(3):
            conn.request("GET", "/api/v1/openapi.json")
            response = conn.getresponse()
            body = response.read()
            assert response.status == 200 and b'"openapi"' in body
            assert (response.getheader("Connection") or "").lower() != "close"
            # Still the same TCP connection: nothing reconnected underneath.
            assert conn.sock is not None and conn.sock.getsockname()[1] == local_port
    finally:
        server.terminate()
        server.wait(timeout=15)


# --- bin/run: the quick start, for real ---------------------------------------------


@pytest.mark.slow
def test_quick_start_is_one_command_with_a_generated_key_over_plain_http(tmp_path):
    """bin/run with no SECRET_KEY: it makes one in var/secret_key (kept, mode 600),
    and serves the dashboard over plain HTTP (no redirect to https)."""
    import http.client
    import signal
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dropped = ("SECRET_KEY", "SECRET_KEY_FILE", "CONTEXTSVC_PLAIN_HTTP", "DJANGO_SETTINGS_MODULE")
    env = {k: v for k, v in os.environ.items() if k not in dropped and k != "REDIS_URL"}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        CONTEXTSVC_VAR_DIR=str(tmp_path / "var"),
        PORT=str(port),
        DEBUG="false",
    )
    log = (tmp_path / "run.log").open("wb")
    run = subprocess.Popen(
        ["bin/run"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert run.poll() is None, (tmp_path / "run.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "run.log").read_text()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/accounts/login/")
                response = conn.getresponse()
                body = response.read()
                break
            except OSError:
                time.sleep(0.5)
        assert response.status == 200, (response.status, response.getheader("Location"))
        assert b'name="password"' in body
        assert response.getheader("Strict-Transport-Security") is None
        assert "Secure" not in (response.getheader("Set-Cookie") or "")
        key_file = tmp_path / "var" / "secret_key"  # the var folder: CONTEXTSVC_VAR_DIR
        assert len(key_file.read_text().strip()) >= 50
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        # The key, the operator login and the ready curl come last, after every
        # line of bin/setup, bin/run and the migrations.
        lines = (tmp_path / "run.log").read_text().splitlines()
        demo_key = (tmp_path / "var" / "demo_key.txt").read_text().strip()
        last = max(i for i, line in enumerate(lines) if line.startswith(("run:", "setup:")))
        tail = "\n".join(lines[last + 1 :])
        assert f"agent key   {demo_key}" in tail and "login: operator" in tail
        assert f"curl -H 'Authorization: Bearer {demo_key}'" in tail
    finally:
        run.send_signal(signal.SIGTERM)  # bin/run stops its web server and worker
        try:
            run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        log.close()


# --- bin/manage: manage.py from any shell ---------------------------------------------


def test_readme_runs_manage_py_through_bin_manage():
    """A newcomer's shell has no venv active (its python has no Django) and no
    SECRET_KEY: outside a container the README says bin/manage, never python manage.py."""
    lines = (ROOT / "README.md").read_text().splitlines()
    bare = [line for line in lines if "python manage.py" in line and "docker compose" not in line]
    assert not bare, bare
    assert any("bin/manage create_agent_key" in line for line in lines)


def test_bin_manage_works_without_the_venv_or_a_secret_key(tmp_path):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIRTUAL_ENV", "SECRET_KEY", "SECRET_KEY_FILE", "DJANGO_SETTINGS_MODULE")
    }
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # the venv's python is not on it
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    env["DEBUG"] = "false"
    manage = str(ROOT / "bin" / "manage")
    migrate = subprocess.run(
        [manage, "migrate", "--noinput"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert migrate.returncode == 0, migrate.stderr
    made = subprocess.run(
        [manage, "create_agent_key", "readme-agent"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("cx_") and len(key) > 20


def test_csrf_trusted_origins_follow_port_issue_17():
    """PORT=9000 bin/run (or docker compose): the dashboard's forms post from :9000."""
    code = "from django.conf import settings as s; print(','.join(s.CSRF_TRUSTED_ORIGINS))"
    base = {k: v for k, v in os.environ.items() if k not in ("CSRF_TRUSTED_ORIGINS", "PORT")}
    base.update(
        DJANGO_SETTINGS_MODULE="contextsvc.settings",
        SECRET_KEY=secrets.token_urlsafe(50),
        DEBUG="false",
    )

    def origins(**extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", f"import django; django.setup(); {code}"],
            cwd=ROOT, env={**base, **extra}, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout.strip().splitlines()[-1]

    assert origins(PORT="9000") == "http://localhost:9000,http://127.0.0.1:9000"
    assert origins() == "http://localhost:8000,http://127.0.0.1:8000"
    assert origins(PORT="9000", CSRF_TRUSTED_ORIGINS="https://ops.example") == "https://ops.example"
    env = _env(_compose()["services"]["web"])
    assert (
        env["PORT"] == "${PORT:-8000}"
        and env["CSRF_TRUSTED_ORIGINS"] == "${CSRF_TRUSTED_ORIGINS:-}"
    )
    assert 'export PORT="${PORT:-8000}"' in (ROOT / "bin/run").read_text()
