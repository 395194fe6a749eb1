"""The cost-aware planner in the service: when auto compaction runs, what a run costs,
the pinned task, and old tool outputs cleared with compactions instead of per append."""

from __future__ import annotations

import pytest

from compaction.models import CompactionRun
from compaction.services.requests import compaction_request
from compaction.services.sync import compaction_run_sync
from sessions.models import Message
from sessions.services.append import session_append_messages

from .conftest import LOG, turn

pytestmark = pytest.mark.django_db


def compact(session, **kw) -> CompactionRun:
    run, _ = compaction_request(
        session=session, trigger="manual", reason={"kind": "manual"}, enqueue=False, **kw
    )
    return compaction_run_sync(run=run)


def test_a_run_records_what_it_cost(session_factory, alice):
    session = session_factory(6)
    run = compact(session, strategy="summarize")
    assert run.status == "succeeded" and run.changed, run.error
    cost = run.cost
    assert cost["summary_output_tokens"] > 0 and cost["rewritten_tokens"] > 0
    # The summary call re-read the session's context: most of its input is the cached prefix.
    assert 0.5 * cost["summary_input_tokens"] < cost["summary_cached_tokens"]
    assert cost["summary_cached_tokens"] < cost["summary_input_tokens"]
    assert cost["units"] > 5 * cost["summary_output_tokens"]
    assert alice.get(f"compactions/{run.pk}").json()["cost"] == cost


def test_the_task_stays_verbatim_above_the_summary_across_compactions(session_factory):
    session = session_factory(6)
    task = Message.objects.get(session=session, seq=1).content
    compact(session, strategy="summarize")
    session.refresh_from_db()
    first = session.retain
    assert task in first
    for t in range(6, 9):
        session_append_messages(session=session, messages=turn(t))
    session.refresh_from_db()
    compact(session, strategy="summarize")
    session.refresh_from_db()
    assert session.retain == first and session.window_start_seq > 1


def test_the_planner_compacts_before_the_guard_tier(
    session_factory, enqueued, django_capture_on_commit_callbacks
):
    # Small answers, big window: the guard stays "ok" long after a compaction pays.
    session = session_factory(
        0, context_window=64_000, policy={"tool_output_cache": {"context_budget_tokens": 60_000}}
    )
    t = 0
    while not enqueued and t < 40:
        with django_capture_on_commit_callbacks(execute=True):
            session_append_messages(session=session, messages=turn(t, text_words=50))
        t += 1
    session.refresh_from_db()
    assert enqueued and session.guard_status == "ok"
    assert t > 2  # not at once: the first turns do not pay for a compaction


def test_old_outputs_wait_for_a_compaction_instead_of_a_trim_per_append(session_factory):
    # Default (derived) budget and automatic compaction on: no per-append trim. The
    # insertion cap is off (view_share 1): it would cut these outputs under the budget.
    cache = {"view_share": 1}
    deferred = session_factory(0, policy={"tool_output_cache": cache})
    # The same with automatic compaction off: the per-append trim
    # (docs/concepts/trimming.md#trim-with-compaction).
    trimmed = session_factory(0, policy={"tool_output_cache": cache, "compaction": {"auto": False}})
    for session in (deferred, trimmed):
        # Outputs over the derived budget (6,500), the context well under the limit.
        for t in range(3):
            session_append_messages(session=session, messages=turn(t, output=LOG * 3, text_words=5))
    states = {
        s: set(Message.objects.filter(session=s, role="tool").values_list("view_state", flat=True))
        for s in (deferred, trimmed)
    }
    assert "trimmed" not in states[deferred]
    assert "trimmed" in states[trimmed]


@pytest.mark.parametrize(
    "knob",
    [
        {"target_ratio": 2},
        {"target_ratio": 0.01},
        {"summary_max_tokens": 10},
        {"summary_input_max_tokens": 5},
        {"planner": "bogus"},
        {"keep_last_n": 0},
        {"strategy": "trees"},
    ],
)
def test_compaction_knobs_are_validated_with_bounds(alice, knob):
    response = alice.post(
        "sessions", {"model": "claude-sonnet-4-5", "policy": {"compaction": knob}}
    )
    assert response.status_code == 422, response.content
    assert next(iter(knob)) in response.json()["error"]["message"]


def test_every_knob_is_accepted_in_bounds(alice):
    knobs = {
        "planner": "threshold",
        "target_ratio": 0.3,
        "summary_max_tokens": 512,
        "summary_input_max_tokens": 8_000,
        "summary_reuse_cache": False,
        "pin_task": False,
        "keep_last_n": 10,
        "strategy": "sliding_window",
    }
    response = alice.post(
        "sessions", {"model": "claude-sonnet-4-5", "policy": {"compaction": knobs}}
    )
    assert response.status_code == 201, response.content
    assert (
        response.json()["policy"]["compaction"] | knobs == response.json()["policy"]["compaction"]
    )


def test_planner_clear_queues_a_clearing_run_before_a_compaction_is_due(
    session_factory, enqueued, django_capture_on_commit_callbacks
):
    policy = {"compaction": {"planner_clear": True}, "tool_output_cache": {}}
    session = session_factory(0, context_window=64_000, policy=policy)
    t = 0
    while not enqueued and t < 40:
        with django_capture_on_commit_callbacks(execute=True):
            session_append_messages(session=session, messages=turn(t, output=LOG * 4, text_words=5))
        t += 1
    run = CompactionRun.objects.get(pk=enqueued[0][0])
    assert run.strategy == "tool_clearing" and run.trigger == "auto"


def test_agent_pinned_messages_stay_verbatim_above_the_summary_and_are_never_cleared(
    session_factory, alice
):
    """A message posted with ``"pinned": true`` survives every compaction
    word for word in the retain slot (the cached prefix), and a pinned tool result
    is not cleared while its neighbours are."""
    session = session_factory(2)
    note = "PINNED NOTE: the release branch is rel/7.3; never touch vendor/."
    sid = session.external_id
    body = {"messages": [{"role": "user", "content": note, "pinned": True}]}
    response = alice.post(f"sessions/{sid}/messages", body)
    assert response.status_code == 200, response.content
    for t in range(2, 5):
        session_append_messages(session=session, messages=turn(t))
    pinned_output = Message.objects.filter(session=session, role="tool").order_by("seq").first()
    Message.objects.filter(pk=pinned_output.pk).update(pinned=True)
    session.refresh_from_db()
    run = compact(session, strategy="tool_clearing")
    assert run.status == "succeeded" and run.changed, run.error
    pinned_output.refresh_from_db()
    assert pinned_output.view_state == "full"
    cleared = Message.objects.filter(session=session, role="tool", view_state="cleared")
    assert cleared.exists()
    run = compact(session, strategy="summarize")
    assert run.status == "succeeded" and run.changed, run.error
    session.refresh_from_db()
    assert note in session.retain and session.window_start_seq > 3
    first_retain = session.retain
    for t in range(5, 8):
        session_append_messages(session=session, messages=turn(t))
    session.refresh_from_db()
    compact(session, strategy="summarize")
    session.refresh_from_db()
    # The slot only grows: what was pinned before stays where it was.
    assert session.retain.startswith(first_retain)
    ctx = alice.get(f"sessions/{sid}/context", format="raw").json()
    assert note in str(ctx)


def test_the_summary_call_of_a_session_over_its_limit_resends_its_own_tools(session_factory, alice):
    """A session past its limit builds in final mode (the final-report tool alone), but
    the prefix the provider cached is the agent's last call, with the session's tools:
    a summary call sent with the final-report tool would read nothing from the cache."""
    from contextsvc.engine.offline_summarizer import OfflineSummarizer

    session = session_factory(0, policy={"compaction": {"auto": False}})
    tool = {
        "name": "bash",
        "description": "Run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
    assert alice.put(f"sessions/{session.external_id}/tools", [tool]).status_code == 200
    t = 0
    while session.guard_status != "final" and t < 30:
        session_append_messages(session=session, messages=turn(t))
        session.refresh_from_db()
        t += 1
    assert session.guard_status == "final"
    requests = []

    class Recording:
        name = "offline"

        def complete(self, request):
            requests.append(request)
            return OfflineSummarizer().complete(request)

    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="summarize",
        enqueue=False,
    )
    assert compaction_run_sync(run=run, summarizer=Recording()).status == "succeeded"
    prefix = requests[0].prefix
    assert prefix is not None and [t.name for t in prefix.tools] == ["bash"]
    assert prefix.final_instruction is None
    # Calls travel as tool blocks, as the agent's own calls sent them.
    assert any(m.tool_calls for m in requests[0].llm_messages())


def test_a_task_too_big_to_pin_verbatim_keeps_its_names_in_the_context(session_factory, alice):
    """At a small window: a first message (a worked demonstration plus the
    task) over 0.6 of the history room is pinned condensed, and the paths and names
    only its middle gives are still in the context the agent gets, unchanged by a
    later compaction (the retain slot stays in the cached prefix)."""
    session = session_factory(0)
    sid = session.external_id
    prose = ["The agent read the output and chose its next step with care."] * 700
    middle = "[File: /srv/demo/src/locking/backend_fcntl.py (212 lines total)]"
    head = "Here is a demonstration; your task follows it: fix LOCK_EX in portalocker."
    tail = "Run tests/test_portalocker.py when you are done."
    task = "\n".join([head, *prose[:350], middle, *prose[350:], tail])
    response = alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": task}]}
    )
    assert response.status_code == 200, response.content
    for t in range(2):
        response = alice.post(f"sessions/{sid}/messages", {"messages": turn(t)[1:]})
        assert response.status_code == 200, response.content
    response = alice.post(f"sessions/{sid}/compact", {"wait": True, "strategy": "summarize"})
    assert response.status_code == 200, response.content
    session.refresh_from_db()
    assert session.window_start_seq > 1  # the task left the messages
    first = session.retain
    assert "Condensed to fit the context window" in first
    body = alice.get(f"sessions/{sid}/context", format="openai").json()
    text = "\n".join(str(m.get("content")) for m in body["messages"])
    assert middle in text and head in text and tail in text
    assert task not in text  # condensed, not whole
    assert body["budget"]["guard"]["status"] in ("ok", "compact")
    for t in range(2, 5):
        assert alice.post(f"sessions/{sid}/messages", {"messages": turn(t)}).status_code == 200
    response = alice.post(f"sessions/{sid}/compact", {"wait": True, "strategy": "summarize"})
    assert response.status_code == 200, response.content
    session.refresh_from_db()
    assert session.retain == first
