"""A scripted agent loop of 200 calls through the proxy: large tool outputs that would overflow the
model's window sent directly stay inside it, and the transcript is the loop's own history.

The agent keeps its whole history and sends it on every call (as an SDK agent
does); the proxy syncs it, compacts when the guard says so — in the background
on a real Celery worker (Redis, PostgreSQL; CI fails rather than skips without
them), or at block in the request — and sends the managed context. The same
loop posted through the REST API stores the same transcript, message by
message, content included.
"""

from __future__ import annotations

import time

import pytest
from asgiref.sync import async_to_sync

from compaction.models import CompactionRun
from contextsvc.engine.providers.anthropic import messages_to_transcript
from fakes.anthropic_server import estimate_tokens
from fakes.streams import ScriptedReply, tool_call
from sessions.models import AgentKey, Message, Session
from sessions.services.sessions import session_create
from tests.compaction.test_worker_e2e import start_worker, worker_env  # noqa: F401 - fixtures
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = [*PROXY_DB, pytest.mark.needs_worker]

MODEL = "claude-opus-4-5"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]
CALLS = 200
WINDOW = 60_000
# What the model says each step: the conversation itself outgrows the window
# (not only the tool outputs, which trimming keeps in check), so compaction runs.
NOTE = "I read the file and noted what it holds for the next steps. " * 40


SESSION = {
    "model": MODEL,
    "context_window": WINDOW,
    "max_output_tokens": 1000,
    "buffer_tokens": 2000,
}
# What the two transcripts must share (seqs, counts and views are the store's:
# views depend on when compaction ran; output refs are random).
FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning")


def _transcript(sid: str) -> list[tuple]:
    return list(
        Message.objects.filter(session__external_id=sid).order_by("seq").values_list(*FIELDS)
    )


def _rest_loop(alice, history: list[dict]) -> None:
    """The same agent on the REST API: it posts each message of its history as it comes."""
    assert alice.post("sessions", {**SESSION, "id": "ses_loop_rest"}).status_code == 201
    for message in history:
        response = alice.post(
            "sessions/ses_loop_rest/messages", {"messages": messages_to_transcript([message])}
        )
        assert response.status_code == 200, response.content


def _runs_finish(sid: str, worker, timeout: float = 120) -> list[CompactionRun]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = list(CompactionRun.objects.filter(session__external_id=sid))
        if all(run.is_finished for run in runs):
            return runs
        time.sleep(0.2)
    raise AssertionError(f"compaction runs still queued after {timeout}s\n{worker.log()}")


def test_two_hundred_calls_stay_inside_the_window_and_the_transcript_is_the_history(
    upstreams,
    alice_key,
    alice,
    start_worker,  # noqa: F811 - the imported fixture
):
    worker = start_worker()
    fake, _ = upstreams
    fake.window = WINDOW
    session_create(
        owner=AgentKey.objects.get(pk=alice_key[0].pk), data={**SESSION, "id": "ses_loop"}
    )
    fake.script(
        *(
            ScriptedReply(
                text=f"step {n}: " + NOTE,
                tool_calls=[tool_call("read_file", {"n": n}, id=f"toolu_{n}")],
            )
            for n in range(CALLS - 1)
        ),
        ScriptedReply(text="all read"),
    )
    history: list[dict] = [{"role": "user", "content": "read every file"}]

    async def loop():
        client = asgi_claude(alice_key[1], session="ses_loop")
        for n in range(CALLS):
            reply = await client.messages.create(
                model=MODEL, max_tokens=1000, tools=TOOLS, messages=history
            )
            history.append(
                {"role": "assistant", "content": [b.model_dump() for b in reply.content]}
            )
            if reply.stop_reason != "tool_use":
                return
            output = f"file {n}\n" + "\n".join(f"line {i}: {'x' * 60}" for i in range(120))
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": output}
                    ],
                }
            )

    async_to_sync(loop)()
    sent = fake.messages_requests()
    assert len(sent) == CALLS
    assert all(r.status == 200 for r in sent), [r.error for r in sent if r.status != 200][:1]
    # Sent directly, the agent's own history would not have fitted.
    direct = {"system": None, "messages": history, "tools": TOOLS}
    assert estimate_tokens(direct) > 3 * WINDOW
    # Through the proxy every request fitted: older outputs went out as trimmed
    # views (docs/concepts/trimming.md#budget-trim) or were compacted away.
    assert max(estimate_tokens(r.body) for r in sent) <= WINDOW
    views = Message.objects.filter(session__external_id="ses_loop", role="tool")
    trimmed = views.exclude(view_state="full").count()
    compacted = CompactionRun.objects.filter(session__external_id="ses_loop").count()
    assert trimmed + compacted > 0

    # Background compaction ran on the worker: every run it was given finished.
    runs = _runs_finish("ses_loop", worker)
    assert runs and all(run.status == "succeeded" for run in runs), [r.error for r in runs]
    assert any(run.celery_task_id for run in runs)

    # The transcript is what the loop would have posted through the REST API:
    # every message of its history, in order, once.
    stored = list(
        Message.objects.filter(session__external_id="ses_loop")
        .order_by("seq")
        .values_list("role", "tool_call_id", "tool_calls")
    )
    expected = [("user", None, [])]
    for n in range(CALLS - 1):
        expected.append(("assistant", None, [f"toolu_{n}"]))
        expected.append(("tool", f"toolu_{n}", []))
    expected.append(("assistant", None, []))
    assert [(r, c, [t["id"] for t in (calls or [])]) for r, c, calls in stored] == expected

    # Message by message, content included: the same loop through the REST API.
    _rest_loop(alice, history)
    proxied, posted = _transcript("ses_loop"), _transcript("ses_loop_rest")
    assert len(proxied) == len(posted) == len(expected)
    for n, (a, b) in enumerate(zip(proxied, posted, strict=True)):
        assert a == b, f"message {n} differs"
    assert Session.objects.get(external_id="ses_loop").window_start_seq > 1  # it was compacted
