"""Dashboard fixtures: an operator (staff) login, a non-staff user, and
sessions built through the same services the API calls."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

OPERATOR_PASSWORD = "operator-pass-1"


@pytest.fixture
def operator(db):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(
        username="operator", password=OPERATOR_PASSWORD, is_staff=True
    )


@pytest.fixture
def op(operator) -> Client:
    """A logged-in operator's browser."""
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def visitor(db) -> Client:
    """Logged in, but not staff: no dashboard."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="visitor", password="x")
    client = Client()
    client.force_login(user)
    return client


HX = {"HX-Request": "true"}


def tool_output(n_lines: int, *, every: int = 37) -> str:
    return "\n".join(
        f"line {i}: {'ERROR timeout in handler' if i % every == 0 else 'ok value=' + str(i * 7)}"
        for i in range(n_lines)
    )


def build_session(
    key,
    *,
    sid: str = "run-1",
    turns: int = 3,
    calls_per_turn: int = 1,
    tool_lines: int = 40,
    usage: bool = True,
    window: int = 32_000,
    user_text: str | None = None,
    builds: bool = False,
) -> Any:
    """A session as an agent loop posts it: per turn a user message, assistant
    tool calls with their results, a final assistant answer, and (optionally)
    the provider's usage report. With ``builds``, the context is fetched after
    each turn (one ContextCall per turn, completed by the usage report)."""
    from sessions.models import Session
    from sessions.services.append import session_append_messages
    from sessions.services.sessions import session_create, session_set_sections
    from sessions.services.tools import session_set_tools
    from sessions.services.usage import session_record_usage

    session = session_create(
        owner=key,
        data={
            "id": sid,
            "agent": "coder",
            "model": "claude-sonnet-4-5",
            "context_window": window,
            "max_output_tokens": 4_096,
            "buffer_tokens": 2_048,
        },
    )
    session = session_set_sections(
        session=session,
        sections=[
            {
                "name": "base",
                "kind": "base",
                "cacheable": True,
                "content": "You are a careful coding agent.",
            },
            {
                "name": "AGENT.md",
                "kind": "rules",
                "cacheable": True,
                "content": "Run the tests after every change.",
            },
        ],
    )
    session = session_set_tools(
        session=session,
        tools=[
            {
                "name": "bash",
                "description": "Run a shell command",
                "category": "builtin",
                "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
            }
        ],
    )
    for t in range(turns):
        batch: list[dict[str, Any]] = [
            {"role": "user", "content": user_text or f"Step {t}: fix module {t}."}
        ]
        for k in range(calls_per_turn):
            call_id = f"call_{t}_{k}"
            batch.append(
                {
                    "role": "assistant",
                    "content": f"Checking {k}.",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "name": "bash",
                            "arguments": {"command": f"pytest -k mod{t}"},
                        }
                    ],
                }
            )
            batch.append(
                {"role": "tool", "tool_call_id": call_id, "content": tool_output(tool_lines)}
            )
        answer = {"role": "assistant", "content": f"Module {t} fixed."}
        if builds:
            # The request that produced the turn's answer: built after its tool results.
            from prompting.context.service import context_for_call

            session_append_messages(session=session, messages=batch)
            session.refresh_from_db()
            context_for_call(session=session, fmt="anthropic", preflight=False)
            batch = [answer]
        else:
            batch.append(answer)
        session_append_messages(session=session, messages=batch)
        if usage:
            session.refresh_from_db()
            session_record_usage(
                session=session,
                usage={
                    "input_tokens": session.used_tokens,
                    "output_tokens": 50,
                    "cache_read_tokens": 0,
                    "cache_creation_tokens": 0,
                },
            )
    return Session.objects.get(pk=session.pk)


@pytest.fixture
def make_dash_session(alice_key):
    def _make(**kw: Any):
        return build_session(alice_key[0], **kw)

    return _make
