"""A client's tools get their category from their name, the same in every dialect:
``mcp`` for an MCP server's ``mcp__<server>__<tool>``, ``client`` for the agent's own."""

from __future__ import annotations

import pytest

from contextsvc.engine.providers import anthropic, openai_chat, openai_responses
from contextsvc.engine.providers.common import client_tool_category

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
NAMES = ["Bash", "mcp__github__create_issue", "Read"]


def _anthropic(names: list[str]) -> dict:
    tools = [{"name": n, "description": "d", "input_schema": SCHEMA} for n in names]
    return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
            "tools": tools}  # fmt: skip


def _chat(names: list[str]) -> dict:
    tools = [
        {"type": "function", "function": {"name": n, "description": "d", "parameters": SCHEMA}}
        for n in names
    ]
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}


def _responses(names: list[str]) -> dict:
    tools = [
        {"type": "function", "name": n, "description": "d", "parameters": SCHEMA} for n in names
    ]
    return {"model": "m", "input": "hi", "tools": tools}


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("Bash", "client"),
        ("mcp__github__create_issue", "mcp"),
        ("mcp__xcode__build__run", "mcp"),  # the tool's own name may hold "__"
        ("mcp__github", "client"),  # no tool part: not an MCP server's name
        ("mcp____x", "client"),  # no server
        ("mcp__github__", "client"),  # no tool
        ("my_mcp__a__b", "client"),
        ("tool_search", "client"),  # a client's tool of that name is still the client's
    ],
)
def test_the_category_follows_the_mcp_naming(name, category):
    assert client_tool_category(name) == category


@pytest.mark.parametrize(
    ("convert", "body"),
    [
        (anthropic.request_to_transcript, _anthropic),
        (openai_chat.request_to_transcript, _chat),
        (openai_responses.request_to_transcript, _responses),
    ],
    ids=["anthropic", "chat", "responses"],
)
def test_every_dialect_gives_client_and_mcp_tools_the_same_categories(convert, body):
    converted = convert(body(NAMES))
    assert [(t.name, t.category) for t in converted.tools] == [
        ("Bash", "client"),
        ("mcp__github__create_issue", "mcp"),
        ("Read", "client"),
    ]
