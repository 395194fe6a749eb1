"""docs/concepts/compaction.md#sandwich behind the proxy: a proxied session keeps working after a
sandwich compaction — the client still sends its whole history, the sync
appends only what is new (no divergence), and upstream gets the head as
messages, the summary in the system prompt and the tail, a request the fake
Messages server validates. A client that rewrites its history restarts the
window, head included."""

from __future__ import annotations

import json

from asgiref.sync import async_to_sync

from compaction.services.requests import compaction_request
from compaction.services.sync import compaction_run_sync
from contextsvc.engine.recall import SEARCH_TOOL_NAME
from contextsvc.engine.summarize import SummaryResult
from fakes.streams import ScriptedReply, tool_call
from proxy.models import ClientView
from sessions.models import Session
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]


class Fixed:
    name = "fixed"

    def complete(self, request):
        return SummaryResult(text="They read a.py and b.py.", model="m", summarizer=self.name)


def send(key: str, sid: str, messages: list[dict]):
    async def call():
        client = asgi_claude(key, session=sid)
        return await client.messages.create(
            model=MODEL, max_tokens=256, messages=messages, tools=TOOLS
        )

    return async_to_sync(call)()


def echo(message) -> dict:
    return {"role": "assistant", "content": [b.model_dump() for b in message.content]}


def converse(fake, key: str, sid: str, turns: int) -> list[dict]:
    """``turns`` turns of question → tool call → result → answer, through the proxy."""
    history: list[dict] = []
    for t in range(turns):
        fake.script(
            ScriptedReply(
                text=f"Reading {t}.",
                tool_calls=[tool_call("read_file", {"p": f"f{t}"}, id=f"toolu_{t:02d}")],
            ),
            ScriptedReply(text=f"Answer {t}: it prints {t}."),
        )
        history.append({"role": "user", "content": f"question {t}: what does f{t} print?"})
        first = send(key, sid, history)
        history += [
            echo(first),
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{t:02d}", "content": f"p({t})"}
                ],
            },
        ]
        history.append(echo(send(key, sid, history)))
    return history


def sandwich_compact(sid: str) -> Session:
    session = Session.objects.get(external_id=sid)
    session.policy = {**(session.policy or {}), "compaction": {"strategy": "sandwich"}}
    session.save(update_fields=["policy"])
    run, _ = compaction_request(
        session=session,
        trigger="manual",
        reason={"kind": "manual"},
        strategy="sandwich",
        enqueue=False,
    )
    run = compaction_run_sync(run=run, summarizer=Fixed())
    assert run.status == "succeeded" and run.changed, (run.error_code, run.error)
    session.refresh_from_db()
    return session


def test_spec004_sandwich_proxied_session_keeps_working_after_a_sandwich_compaction(
    upstreams, alice_key
):
    fake, _ = upstreams
    key = alice_key[1]
    history = converse(fake, key, "ses_sw1", turns=5)
    session = sandwich_compact("ses_sw1")
    # Top 5 grown to the next turn start: turns 0 and 1 (question, call, result, answer).
    assert session.head_end_seq == 8
    appended = session.last_seq

    fake.script(ScriptedReply(text="Six."))
    history.append({"role": "user", "content": "question 5: and f5?"})
    send(key, "ses_sw1", history)
    session.refresh_from_db()
    # The sync appended only the new question and the reply: no divergence.
    assert session.last_seq == appended + 2
    assert ClientView.objects.get(session=session).divergences == 0
    assert session.head_end_seq == 8

    sent = fake.messages_requests()[-1].body  # validated by the fake Messages server
    messages = sent["messages"]
    assert "question 0" in json.dumps(messages[0])
    assert [b["id"] for b in messages[1]["content"] if b["type"] == "tool_use"] == ["toolu_00"]
    assert "toolu_00" in json.dumps(messages[2])
    system = json.dumps(sent["system"])
    # The summary enters the context with the search hint after it (engine.recall).
    assert "[Earlier conversation summary: They read a.py and b.py.\\n\\n" in system
    assert system.count(SEARCH_TOOL_NAME) == 1
    text = json.dumps(messages)
    assert "question 1" in text and "question 2" not in text and "They read a.py" not in text
    assert "question 5: and f5?" in json.dumps(messages[-1])


def test_spec004_sandwich_client_rewrite_after_a_sandwich_restarts_without_the_head(
    upstreams, alice_key
):
    fake, _ = upstreams
    key = alice_key[1]
    # Five turns: with four, the middle is smaller than a summary and its search
    # hint, and the compaction (rightly) does not apply.
    history = converse(fake, key, "ses_sw2", turns=5)
    assert sandwich_compact("ses_sw2").head_end_seq == 8
    fake.script(ScriptedReply(text="Fine."))
    # The client compacts its own history: the sync restarts the live window
    # at its new view, which replaces everything (the head too).
    rewritten = [
        {"role": "user", "content": "Summary so far: four files read."},
        *history[-1:],
        {"role": "user", "content": "next"},
    ]
    send(key, "ses_sw2", rewritten)
    session = Session.objects.get(external_id="ses_sw2")
    assert ClientView.objects.get(session=session).divergences == 1
    assert session.head_end_seq == 0
    sent = json.dumps(fake.messages_requests()[-1].body["messages"])
    assert "question 0" not in sent and "Summary so far" in sent
