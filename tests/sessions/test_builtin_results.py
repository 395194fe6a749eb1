"""A built-in tool's result posted back: kept in its message, pointing into the ref it read.

No new ToolOutput (and no new ref) is made of it, so a grep of a grep cannot
happen; it is cut like any other result when large, counted by its view, and
GC keeps the ref it points into.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions.models import Message, Session, ToolOutput
from sessions.outputs.gc import outputs_gc
from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

LOG = "".join(f"line {i}: {'error' if i % 3 == 0 else 'ok'} {'x' * 60}\n" for i in range(3000))


def start(alice, sid: str, policy: dict | None = None) -> str:
    """A session with one big bash output in it; → that output's ref."""
    body = {"model": "claude-sonnet-4-5", "id": sid, "policy": policy or {}}
    assert alice.post("sessions", body).status_code == 201
    posted = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", LOG)})
    assert posted.status_code == 200, posted.content
    return posted.json()["messages"][-1]["output_ref"]


def call_and_post(alice, sid: str, name: str, arguments: dict, call_id: str) -> dict:
    """Run a built-in through the API and post its call and result as an agent does."""
    result = alice.post(f"sessions/{sid}/tools/{name}/call", arguments)
    assert result.status_code == 200, result.content
    turn = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result.json())},
    ]
    posted = alice.post(f"sessions/{sid}/messages", {"messages": turn})
    assert posted.status_code == 200, posted.content
    return posted.json()["messages"][-1]


def test_a_grep_result_points_into_the_ref_it_read_and_stores_no_output(alice):
    ref = start(alice, "ses_br1")
    outputs = ToolOutput.objects.count()
    appended = call_and_post(
        alice, "ses_br1", "tool_output_cache_grep", {"ref_id": ref, "pattern": "line 3:"}, "c2"
    )
    assert ToolOutput.objects.count() == outputs
    assert appended["output_ref"] == ref and appended["ref"] is None
    message = Message.objects.get(session__external_id="ses_br1", seq=appended["seq"])
    assert message.output_ref == ref and message.view is None and message.view_state == "full"
    assert json.loads(message.content)["ref_id"] == ref  # the result is the message's own text
    # A read of the same ref: the same rule.
    read = call_and_post(alice, "ses_br1", "tool_output_cache", {"ref_id": ref, "limit": 5}, "c3")
    assert read["output_ref"] == ref and ToolOutput.objects.count() == outputs


def test_a_grep_result_over_the_view_limit_is_cut_and_counted_by_its_view(alice):
    policy = {"tool_output_cache": {"max_message_bytes": 4096}}
    ref = start(alice, "ses_br2", policy)
    appended = call_and_post(
        alice,
        "ses_br2",
        "tool_output_cache_grep",
        {"ref_id": ref, "pattern": "error", "max_matches": 500},
        "c2",
    )
    message = Message.objects.get(session__external_id="ses_br2", seq=appended["seq"])
    assert message.output_ref == ref and message.view_state == "cut"
    assert len(message.content) > 20_000  # the whole result is kept in the message
    assert len(message.view.encode()) <= 4096 and f"It read ref={ref}" in message.view
    assert message.view.startswith(message.content[:1000])
    assert message.view.endswith(message.content[-200:])  # the page's continuation stays
    assert message.token_count < len(message.view) // 2  # counted by the view, not the content
    assert appended["view"] == "cut"  # the append answers the view's state


def test_results_of_tools_that_read_no_ref_point_nowhere(alice):
    start(alice, "ses_br3")
    outputs = ToolOutput.objects.count()
    turn = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c2", "name": "compact_context", "arguments": {}},
                {"id": "c3", "name": "tool_output_cache", "arguments": {"ref_id": "out_gone"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": '{"compacted": false}'},
        {"role": "tool", "tool_call_id": "c3", "content": '{"error": "No output out_gone"}'},
    ]
    posted = alice.post("sessions/ses_br3/messages", {"messages": turn})
    assert posted.status_code == 200, posted.content
    for appended in posted.json()["messages"][1:]:
        assert appended["output_ref"] is None and appended["ref"] is None
    assert ToolOutput.objects.count() == outputs


def test_gc_keeps_the_ref_a_builtin_result_points_into(alice):
    ref = start(alice, "ses_br4")
    call_and_post(alice, "ses_br4", "tool_output_cache_grep", {"ref_id": ref, "pattern": "x"}, "c2")
    session = Session.objects.get(external_id="ses_br4")
    # The bash result leaves the live window; the grep's result stays in it.
    grep_seq = Message.objects.get(session=session, tool_call_id="c2").seq
    Session.objects.filter(pk=session.pk).update(window_start_seq=grep_seq)
    then = timezone.now() - timedelta(days=30)
    ToolOutput.objects.filter(ref=ref).update(created_at=then, last_used_at=then)
    assert outputs_gc(older_than_days=7)["count"] == 0
    assert ToolOutput.objects.filter(ref=ref).exists()


def test_a_page_posted_alone_after_its_call_points_into_the_ref_its_call_named(alice):
    ref = start(alice, "ses_br5")
    arguments = {"ref_id": ref, "limit": 3}
    page = alice.post("sessions/ses_br5/tools/tool_output_cache/call", arguments).json()
    call = {"id": "c2", "name": "tool_output_cache", "arguments": arguments}
    first = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    assert alice.post("sessions/ses_br5/messages", {"messages": first}).status_code == 200
    outputs = ToolOutput.objects.count()
    result = [{"role": "tool", "tool_call_id": "c2", "content": page["text"]}]
    posted = alice.post("sessions/ses_br5/messages", {"messages": result}).json()
    assert posted["messages"][-1]["output_ref"] == ref
    assert ToolOutput.objects.count() == outputs
