"""The proxy's process in the deploy files: its compose service and its place in bin/run."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_serves_the_proxy_as_an_asgi_process():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    proxy = services["proxy"]
    command = " ".join(proxy["command"])
    assert "contextsvc.asgi:application" in command
    assert "uvicorn_worker.UvicornWorker" in command
    assert proxy["image"] == services["web"]["image"]
    assert proxy["environment"]["DATABASE_URL"] == services["web"]["environment"]["DATABASE_URL"]
    assert "CONTEXTSVC_UPSTREAM_ANTHROPIC_URL" in proxy["environment"]
    assert any("8001" in str(port) for port in proxy["ports"])
    assert proxy["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_bin_run_starts_the_proxy_next_to_the_web_server():
    text = (ROOT / "bin/run").read_text()
    assert "contextsvc.asgi:application" in text
    assert "CONTEXTSVC_PROXY_PORT:-8001" in text
    assert 'stop "$proxy_pid"' in text
