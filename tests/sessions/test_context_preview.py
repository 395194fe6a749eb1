"""The context preview (what the dashboard shows) is a read: it writes and locks nothing,
yet answers what GET /context would."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from prompting.context.build import context_preview
from prompting.models import PromptState
from sessions.models import Session
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

TOOLS = [
    {
        "name": f"mcp_{i}",
        "description": "A tool with a long description. " * 60,
        "category": "mcp",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    for i in range(30)
]


@pytest.fixture
def sid(alice, make_session):
    sid = make_session(id="preview")["id"]
    assert alice.put(f"sessions/{sid}/tools", TOOLS).status_code == 200
    alice.post(
        f"sessions/{sid}/messages",
        {"messages": [{"role": "user", "content": "go"}, *tool_turn("c1", "ok", name="mcp_3")]},
    )
    return sid


def _writes(queries) -> list[str]:
    return [
        q["sql"]
        for q in queries
        if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
        or "FOR UPDATE" in q["sql"].upper()
    ]


def test_preview_writes_and_locks_nothing(sid):
    PromptState.objects.filter(session__external_id=sid).delete()
    session = Session.objects.get(external_id=sid)
    with CaptureQueriesContext(connection) as queries:
        body = context_preview(session, "anthropic")
    assert _writes(queries.captured_queries) == []
    assert not PromptState.objects.filter(session=session).exists()
    assert body["budget"]["deferral"]["registered_tools"] == len(TOOLS)


def test_preview_answers_what_the_next_call_gets(alice, sid):
    session = Session.objects.get(external_id=sid)
    preview = context_preview(session, "anthropic")
    body = alice.get(f"sessions/{sid}/context").json()
    assert preview["messages"] == body["messages"]
    assert preview["tools"] == body["tools"]
    assert preview["system"] == body["system"]


def test_preview_of_a_compacted_window_saves_nothing_it_learned(alice, sid):
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "next"}]})
    # What a compaction leaves: the live window starts after the tool call.
    Session.objects.filter(external_id=sid).update(window_start_seq=4, live_message_count=1)
    state = PromptState.objects.get(session__external_id=sid)
    before = (state.tool_last_used, state.scanned_seq)
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            body = context_preview(Session.objects.get(external_id=sid), "raw")
        assert _writes(queries.captured_queries) == []
        assert [m["content"] for m in body["messages"]][-1:] == ["next"]
    state.refresh_from_db()
    assert (state.tool_last_used, state.scanned_seq) == before
