"""session_set_tools counts what the registry's tool_deferral hook says will be sent."""

from __future__ import annotations

import pytest

from contextsvc.engine.messages import ToolDef
from contextsvc.engine.tokens import estimate_tool_schemas
from sessions import accounting
from sessions.extensions import REGISTRY
from sessions.services.sessions import session_create
from sessions.services.tools import session_set_sent_tool_tokens, session_set_tools

TOOLS = [
    {"name": f"tool_{i}", "description": "Does a thing " * 5, "input_schema": {"type": "object"}}
    for i in range(3)
]


@pytest.fixture
def session(alice_key):
    return session_create(owner=alice_key[0], data={"model": "gpt-4o", "id": "tools"})


def test_without_a_deferral_hook_every_tool_is_counted(session, monkeypatch):
    monkeypatch.setattr(REGISTRY, "tool_deferral", [])
    session = session_set_tools(session=session, tools=TOOLS)
    scale = accounting.estimate_config_of(session).tool_schema_scale
    parsed = [ToolDef(**t) for t in TOOLS]
    expected = estimate_tool_schemas(parsed, accounting.tokenizer_of(session), scale=scale)
    assert session.tool_tokens == expected > 0


def test_the_first_deferral_hook_decides_what_is_counted(session, monkeypatch):
    seen = []

    def deferral(s, tools):
        seen.append([t.name for t in tools])
        return 7

    monkeypatch.setattr(REGISTRY, "tool_deferral", [deferral, lambda s, tools: 99])
    session = session_set_tools(session=session, tools=TOOLS)
    assert session.tool_tokens == 7
    assert seen == [["tool_0", "tool_1", "tool_2"]]


def test_a_failed_deferral_counts_every_tool(session, monkeypatch):
    monkeypatch.setattr(REGISTRY, "tool_deferral", [lambda s, tools: None])
    session = session_set_tools(session=session, tools=TOOLS)
    monkeypatch.setattr(REGISTRY, "tool_deferral", [])
    again = session_set_tools(session=session, tools=TOOLS)
    assert session.tool_tokens == again.tool_tokens > 0


def test_sent_tool_tokens_are_written_under_the_lock_and_copied_back(session, monkeypatch):
    monkeypatch.setattr(REGISTRY, "tool_deferral", [])
    session = session_set_tools(session=session, tools=TOOLS)
    locked = session_set_sent_tool_tokens(session=session, tokens=5)
    assert session.tool_tokens == locked.tool_tokens == 5
    session.refresh_from_db()
    assert session.tool_tokens == 5
    assert session.tools == TOOLS  # the deferred column was left alone
