"""The proxy process's narrowed settings: only /proxy/, an all-async middleware chain."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx2
from asgiref.sync import async_to_sync
from django.core.handlers.asgi import ASGIHandler
from django.utils.module_loading import import_string

from contextsvc import settings_proxy
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY

pytestmark = PROXY_DB
ROOT = Path(__file__).resolve().parents[2]


def _proxy_process(settings) -> ASGIHandler:
    settings.ROOT_URLCONF = settings_proxy.ROOT_URLCONF
    settings.MIDDLEWARE = settings_proxy.MIDDLEWARE
    return ASGIHandler()  # loads the middleware of the settings above


def test_every_proxy_middleware_runs_async_without_a_thread_hop():
    assert all(import_string(path).async_capable for path in settings_proxy.MIDDLEWARE)


def test_proxy_process_serves_the_proxy_with_request_ids(settings, upstreams, alice_key):
    app = _proxy_process(settings)

    async def call() -> httpx2.Response:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await client.get(
                "/proxy/anthropic/v1/models",
                headers={
                    "x-api-key": UPSTREAM_KEY,
                    "X-Contextsvc-Key": alice_key[1],
                    "anthropic-version": "2023-06-01",
                },
            )

    response = async_to_sync(call)()
    assert response.status_code == 200
    assert "claude-fake-large" in response.text
    assert response.headers["X-Request-Id"]


def test_proxy_process_routes_nothing_but_the_proxy(settings, alice_key):
    app = _proxy_process(settings)

    async def call() -> httpx2.Response:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await client.get(
                "/api/v1/sessions", headers={"Authorization": f"Bearer {alice_key[1]}"}
            )

    response = async_to_sync(call)()
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"


def test_a_fresh_proxy_process_loads_the_narrowed_settings(tmp_path):
    # As bin/run and docker-compose start it: no settings module named, or the default one.
    code = (
        "import contextsvc.asgi\n"
        "from django.conf import settings\n"
        "print(settings.SETTINGS_MODULE, settings.ROOT_URLCONF)\n"
    )
    for chosen in (None, "contextsvc.settings"):
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        env.update(DEBUG="true", DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
        if chosen:
            env["DJANGO_SETTINGS_MODULE"] = chosen
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["contextsvc.settings_proxy", "contextsvc.urls_proxy"]
