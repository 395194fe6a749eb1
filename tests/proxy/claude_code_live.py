"""The live proxy for the Claude Code CLI tests: started on the fake upstream, and what they share."""

from __future__ import annotations

from tests.proxy.conftest import UPSTREAM_KEY
from tests.proxy.server import live_proxy

WINDOW = 48_000


def start_proxy(tmp_path, fake_anthropic, *, managed: bool):
    return live_proxy(
        tmp_path,
        CONTEXTSVC_UPSTREAM_ANTHROPIC_URL=fake_anthropic.base_url,
        CONTEXTSVC_UPSTREAM_ANTHROPIC_API_KEY=UPSTREAM_KEY if managed else "",
    )


def make_window_session(client, sid: str, model: str = "claude-fake-large") -> None:
    body = {"id": sid, "model": model, "context_window": WINDOW, "max_output_tokens": 4000}
    response = client.post("sessions", body)
    assert response.status_code == 201, response.content


def messages_requests(fake):
    return [r for r in fake.messages_requests() if not r.path.startswith("/v1/messages/count")]


def markers(body: dict) -> int:
    count = 1 if "cache_control" in body else 0
    count += sum(1 for t in body.get("tools") or () if "cache_control" in t)
    count += sum(1 for b in body.get("system") or () if "cache_control" in b)
    for message in body["messages"]:
        if isinstance(message["content"], list):
            count += sum(1 for b in message["content"] if "cache_control" in b)
    return count
