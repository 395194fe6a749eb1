"""A scripted agent loop of 200 calls through the proxy: large tool outputs that would overflow the
model's window sent directly stay inside it, and the transcript is the loop's own history.

The agent keeps its whole history and sends it on every call (as an SDK agent
does); the proxy syncs it, compacts when the guard says so (the preflight's
synchronous compaction: no worker needed), and sends the managed context.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync

from compaction.models import CompactionRun
from sessions.models import AgentKey, Message
from sessions.services.sessions import session_create
from tests.fakes.anthropic_server import estimate_tokens
from tests.fakes.streams import ScriptedReply, tool_call
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]
CALLS = 200
WINDOW = 60_000


def test_two_hundred_calls_stay_inside_the_window_and_the_transcript_is_the_history(
    upstreams, alice_key
):
    fake, _ = upstreams
    fake.window = WINDOW
    session_create(
        owner=AgentKey.objects.get(pk=alice_key[0].pk),
        data={
            "model": MODEL,
            "id": "ses_loop",
            "context_window": WINDOW,
            "max_output_tokens": 1000,
            "buffer_tokens": 2000,
        },
    )
    fake.script(
        *(
            ScriptedReply(
                text=f"step {n}", tool_calls=[tool_call("read_file", {"n": n}, id=f"toolu_{n}")]
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
    # views (spec 000 §1.7) or were compacted away.
    assert max(estimate_tokens(r.body) for r in sent) <= WINDOW
    views = Message.objects.filter(session__external_id="ses_loop", role="tool")
    trimmed = views.exclude(view_state="full").count()
    compacted = CompactionRun.objects.filter(session__external_id="ses_loop").count()
    assert trimmed + compacted > 0

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
