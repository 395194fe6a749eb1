"""What one proxied call costs the database: a fixed number of statements, whatever the session's length.

Statements are counted in every thread (the proxy works in ``sync_to_async``
threads), through Django's cursors and the hot path's own.
"""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import async_to_sync
from django.db.backends import utils

from fakes.streams import ScriptedReply
from sessions import hotpath
from sessions.extensions import REGISTRY
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"


class Statements:
    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def add(self) -> None:
        with self.lock:
            self.count += 1


@pytest.fixture
def statements(monkeypatch):
    counter = Statements()
    django_execute = utils.CursorWrapper._execute
    hot_execute = hotpath._HotCursor.execute

    def counted(original):
        def execute(self, *args, **kwargs):
            counter.add()
            return original(self, *args, **kwargs)

        return execute

    monkeypatch.setattr(utils.CursorWrapper, "_execute", counted(django_execute))
    monkeypatch.setattr(hotpath._HotCursor, "execute", counted(hot_execute))
    return counter


def history(n: int) -> list[dict]:
    out: list[dict] = []
    for i in range(n // 2):
        out.append({"role": "user", "content": f"step {i}: please look at the handler"})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"done {i}"}]})
    return out


def calls(key: str, sid: str, messages: list[dict], n: int, on_each=None) -> list[dict]:
    """``n`` calls, each adding the reply and a user turn; ``on_each`` before each of them."""

    async def loop():
        client = asgi_claude(key, session=sid)
        for i in range(n):
            if on_each is not None:
                on_each()
            reply = await client.messages.create(model=MODEL, max_tokens=256, messages=messages)
            messages.append(
                {"role": "assistant", "content": [b.model_dump() for b in reply.content]}
            )
            messages.append({"role": "user", "content": f"turn {i}"})

    async_to_sync(loop)()
    return messages


def test_statements_per_call_do_not_grow_with_the_session(upstreams, alice_key, statements):
    fake, _ = upstreams
    per_call = {}
    for size in (10, 200):
        messages = calls(alice_key[1], f"ses_cost_{size}", [*history(size), _user()], 1)
        counts: list[int] = []

        def mark(counts: list[int] = counts) -> None:
            counts.append(statements.count)

        calls(alice_key[1], f"ses_cost_{size}", messages, 3, on_each=mark)
        mark()
        per_call[size] = [b - a for a, b in zip(counts, counts[1:], strict=False)]
    assert per_call[10] == per_call[200], per_call
    assert per_call[200][0] > 10  # the counter sees the proxy's threads
    assert len(set(per_call[200])) == 1  # and from call to call


def test_a_reply_and_its_usage_run_the_after_append_checks_once(upstreams, alice_key, monkeypatch):
    fake, _ = upstreams
    fake.script(ScriptedReply(text="Hello"))
    seen: list[str] = []
    monkeypatch.setattr(REGISTRY, "after_append", [lambda session, state, role: seen.append(role)])
    calls(alice_key[1], "ses_cost_hooks", [_user()], 1)
    assert seen == ["user", "usage"]  # the user turn synced, then the reply with its usage


def _user() -> dict:
    return {"role": "user", "content": "next"}
