"""The transcript sync through the proxy: only what is new, retries, and a client that rewrites its history."""

from __future__ import annotations

import anthropic
import pytest
from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply, tool_call
from proxy.models import ClientView
from proxy.services.sync import MARKER
from sessions.models import Message, Session
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]


def rows(sid: str) -> list[tuple[int, str, str]]:
    session = Session.objects.get(external_id=sid)
    out = []
    for seq, role, content, call_id in (
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "content", "tool_call_id")
    ):
        text = content if isinstance(content, str) else str(content)
        out.append((seq, role, call_id or text[:60]))
    return out


def send(key: str, sid: str, messages: list[dict], **kwargs):
    async def call():
        client = asgi_claude(key, session=sid)
        return await client.messages.create(
            model=MODEL, max_tokens=256, messages=messages, **kwargs
        )

    return async_to_sync(call)()


def echo(message) -> dict:
    return {"role": "assistant", "content": [b.model_dump() for b in message.content]}


def test_a_retry_appends_nothing_and_the_echoed_reply_is_not_new(upstreams, alice_key):
    key = alice_key[1]
    history = [{"role": "user", "content": "first question"}]
    first = send(key, "ses_sync1", history)
    send(key, "ses_sync1", history)  # the client lost the answer and asks again
    assert [r[1] for r in rows("ses_sync1")] == ["user", "assistant", "assistant"]
    history += [echo(first), {"role": "user", "content": "second question"}]
    send(key, "ses_sync1", history)
    assert [r[1] for r in rows("ses_sync1")] == [
        "user",
        "assistant",
        "assistant",
        "user",
        "assistant",
    ]
    assert ClientView.objects.get(session__external_id="ses_sync1").divergences == 0


def test_a_client_that_compacts_itself_restarts_the_window_and_loses_nothing(upstreams, alice_key):
    fake, _ = upstreams
    key = alice_key[1]
    fake.script(
        ScriptedReply(
            text="Reading.", tool_calls=[tool_call("read_file", {"p": "a"}, id="toolu_a")]
        ),
        ScriptedReply(text="It prints one."),
        ScriptedReply(text="Noted."),
        ScriptedReply(text="And the rest."),
    )
    history = [{"role": "user", "content": "what does a.py print? (the original ask)"}]
    first = send(key, "ses_sync2", history, tools=TOOLS)
    history += [
        echo(first),
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "print(1)"}],
        },
    ]
    second = send(key, "ses_sync2", history, tools=TOOLS)
    before = rows("ses_sync2")
    assert [r[1] for r in before] == ["user", "assistant", "tool", "assistant"]

    # The client compacts: its own summary replaces the first question, the
    # tool exchange stays (same tool ids), a new question follows.
    compacted = [
        {"role": "user", "content": "Summary so far: the user asked about a.py."},
        *history[1:],
        echo(second),
        {"role": "user", "content": "now b.py"},
    ]
    third = send(key, "ses_sync2", compacted, tools=TOOLS)
    after = rows("ses_sync2")
    assert after[: len(before)] == before  # nothing stored is lost
    marker = after[len(before)]
    assert marker[1] == "user" and marker[2] == MARKER.format(at=0)[:60]
    assert [r[1] for r in after[len(before) + 1 :]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert after[len(before) + 3][2] == "toolu_a"  # the re-appended result, as sent
    session = Session.objects.get(external_id="ses_sync2")
    assert session.window_start_seq == marker[0] + 1
    sent = fake.messages_requests()[-1].body
    texts = str(sent["messages"])
    assert "Summary so far" in texts and "the original ask" not in texts

    # The next call of the compacted client appends only what is new again.
    compacted += [echo(third), {"role": "user", "content": "thanks"}]
    send(key, "ses_sync2", compacted, tools=TOOLS)
    assert [r[1] for r in rows("ses_sync2")[len(after) :]] == ["user", "assistant"]
    assert ClientView.objects.get(session=session).divergences == 1


def test_a_grown_history_is_checked_past_its_known_prefix_and_its_new_part_validated(
    upstreams, alice_key
):
    """Only what follows the client's previous request is fingerprinted
    and converted; a bad message there is still the provider's 400, and nothing is written."""
    key = alice_key[1]
    history = [{"role": "user", "content": "first question"}]
    first = send(key, "ses_sync_fast", history)
    view = ClientView.objects.get(session__external_id="ses_sync_fast")
    assert (view.raw_count, view.raw_chain) == (1, view.reply_chain)  # the request as sent
    history += [echo(first), {"role": "user", "content": "second question"}]
    send(key, "ses_sync_fast", history)
    view.refresh_from_db()
    assert view.raw_count == 3 and view.divergences == 0
    before = rows("ses_sync_fast")
    bad = [*history, {"role": "assistant", "content": [{"text": "no type"}]}]
    bad.append({"role": "user", "content": "third"})
    with pytest.raises(anthropic.BadRequestError) as raised:
        send(key, "ses_sync_fast", bad)
    assert "messages.3.content.0" in raised.value.body["error"]["message"]  # the request's index
    assert rows("ses_sync_fast") == before
    view.refresh_from_db()
    assert view.raw_count == 3  # the refused call left the view as it was
    # A refused first call creates no session.
    with pytest.raises(anthropic.BadRequestError):
        send(key, "ses_sync_bad_first", [{"role": "robot", "content": "hi"}])
    assert not Session.objects.filter(external_id="ses_sync_bad_first").exists()
