"""A model that reuses a tool-call id once it was answered, through the Anthropic proxy.

The official SDK drives the in-process proxy; upstream is the suite's fake
Messages API, which refuses a request with a repeated ``tool_use`` id, as
Anthropic does. The proxy stores the client's history as sent and forwards
every request with unique ids, each result right after its own call.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync

from fakes.anthropic_rules import InvalidRequest, validate
from fakes.streams import ScriptedReply, tool_call
from proxy.models import ClientView
from sessions.models import Message, Session
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]


def send(key: str, sid: str, messages: list[dict]):
    async def call():
        client = asgi_claude(key, session=sid)
        return await client.messages.create(
            model=MODEL, max_tokens=256, tools=TOOLS, messages=messages
        )

    return async_to_sync(call)()


def echo(message) -> dict:
    return {"role": "assistant", "content": [b.model_dump() for b in message.content]}


def answer(use_id: str, text: str) -> dict:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": use_id, "content": text}],
    }


def sent_pairs(body: dict) -> list[tuple[str, str, str]]:
    """(tool_use id, its path, the text of the tool_result answering it) in a request."""
    uses: dict[str, str] = {}
    pairs = []
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block["type"] == "tool_use":
                uses[block["id"]] = block["input"]["path"]
            elif block["type"] == "tool_result":
                content = block["content"]
                text = content if isinstance(content, str) else content[0]["text"]
                pairs.append((block["tool_use_id"], uses[block["tool_use_id"]], text))
    return pairs


def test_the_fake_messages_api_refuses_a_repeated_tool_use_id():
    use = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}
    body = {
        "model": MODEL,
        "max_tokens": 10,
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ],
    }
    try:
        validate(body)
    except InvalidRequest as exc:
        assert "`tool_use` ids must be unique" in str(exc)
    else:
        raise AssertionError("a repeated tool_use id was accepted")


def test_a_tool_use_id_reused_after_its_result_is_stored_and_forwarded_unique(upstreams, alice_key):
    fake, _ = upstreams
    key = alice_key[1]
    fake.script(
        ScriptedReply(tool_calls=[tool_call("read_file", {"path": "a.py"}, id="toolu_same")]),
        ScriptedReply(tool_calls=[tool_call("read_file", {"path": "b.py"}, id="toolu_same")]),
        ScriptedReply(text="a.py prints 1, b.py prints 2."),
    )
    history = [{"role": "user", "content": "what do a.py and b.py print?"}]
    first = send(key, "ses_reuse", history)
    history += [echo(first), answer("toolu_same", "print(1)")]
    second = send(key, "ses_reuse", history)
    assert [b.id for b in second.content if b.type == "tool_use"] == ["toolu_same"]
    history += [echo(second), answer("toolu_same", "print(2)")]
    third = send(key, "ses_reuse", history)
    assert third.content[0].text == "a.py prints 1, b.py prints 2."

    # Stored as the client sent it: the same id twice, each result with its call.
    session = Session.objects.get(external_id="ses_reuse")
    rows = Message.objects.filter(session=session).order_by("seq")
    assert [c["id"] for r in rows for c in r.tool_calls or ()] == ["toolu_same", "toolu_same"]
    assert [r.tool_call_id for r in rows if r.role == "tool"] == ["toolu_same", "toolu_same"]
    assert session.open_tool_calls == {}
    assert ClientView.objects.get(session=session).divergences == 0
    # Upstream (which refuses a repeated id) got unique ids, each result after its own call.
    last = fake.messages_requests()[-1].body
    assert sent_pairs(last) == [
        ("toolu_same", "a.py", "print(1)"),
        ("toolu_same_2", "b.py", "print(2)"),
    ]


def test_a_first_request_whose_history_already_reuses_an_id_is_accepted(upstreams, alice_key):
    """A client joining mid-run (a replayed tau-bench history) sends the reuse in one batch."""
    fake, _ = upstreams
    fake.script(ScriptedReply(text="Both read."))
    use = {"type": "tool_use", "id": "call_1", "name": "read_file"}
    history = [
        {"role": "user", "content": "read a.py, then b.py"},
        {"role": "assistant", "content": [{**use, "input": {"path": "a.py"}}]},
        answer("call_1", "print(1)"),
        {"role": "assistant", "content": [{**use, "input": {"path": "b.py"}}]},
        answer("call_1", "print(2)"),
    ]
    assert send(alice_key[1], "ses_reuse_batch", history).content[0].text == "Both read."
    assert sent_pairs(fake.messages_requests()[-1].body) == [
        ("call_1", "a.py", "print(1)"),
        ("call_1_2", "b.py", "print(2)"),
    ]


def test_a_client_that_compacts_around_a_pending_call_restarts_with_its_ids_as_sent(
    upstreams, alice_key
):
    """The record's open call is abandoned at the divergence (the window restarts after
    it), so the client's new view may carry the same id, and its result answers it."""
    fake, _ = upstreams
    key = alice_key[1]
    fake.script(
        ScriptedReply(tool_calls=[tool_call("read_file", {"path": "a.py"}, id="toolu_p")]),
        ScriptedReply(text="It prints 1."),
    )
    history = [{"role": "user", "content": "what does a.py print? " + "(context) " * 50}]
    first = send(key, "ses_reuse_div", history)
    assert Session.objects.get(external_id="ses_reuse_div").open_tool_calls == {
        "toolu_p": "read_file"
    }
    compacted = [
        {"role": "user", "content": "Summary: the user asked what a.py prints."},
        echo(first),
        answer("toolu_p", "print(1)"),
    ]
    assert send(key, "ses_reuse_div", compacted).content[0].text == "It prints 1."
    session = Session.objects.get(external_id="ses_reuse_div")
    view = ClientView.objects.get(session=session)
    assert view.divergences == 1 and view.renamed == {}
    assert session.open_tool_calls == {}
    calls = [c["id"] for r in Message.objects.filter(session=session) for c in r.tool_calls or ()]
    assert calls == ["toolu_p", "toolu_p"]
    assert sent_pairs(fake.messages_requests()[-1].body) == [("toolu_p", "a.py", "print(1)")]
