"""What Claude Code sends, replayed with the official SDK through the in-process proxy.

The request shapes are the ones the pinned CLI was seen to send (three system
blocks with ``cache_control``, a ``system`` message after the first user turn,
``ToolSearch`` and a ``defer_loading`` tool, ``context_management``,
``anthropic-beta`` and ``x-claude-code-session-id`` headers). Covered: headers
and unknown fields reach upstream unchanged; the client's tool search is left
alone; at most 4 cache breakpoints; the session named by the client's id; side
requests in linked side sessions; the client compacting itself (the
divergence rule and its dashboard event); the window-too-small 400.
"""

from __future__ import annotations

import anthropic
import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.history_memo import HistoryMemo
from contextsvc.engine.messages import Message as EngineMessage
from contextsvc.engine.prompt import CachePlan
from proxy.models import ClientCompaction
from proxy.providers.anthropic_cache import cap_breakpoints
from sessions.models import Message, ModelProfile, Session
from tests.proxy.claude_code_live import markers
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY, asgi_http

pytestmark = PROXY_DB

MODEL = "claude-opus-4-8"
CLIENT_ID = "3c682a4c-76a7-471e-bf7c-862bf9edc175"
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.9f8;"},
    {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Use tools well. " * 40, "cache_control": {"type": "ephemeral"}},
]
TOOLS = [
    {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object"}},
    {
        "name": "ToolSearch",
        "description": "Find deferred tools",
        "input_schema": {"type": "object"},
    },
    {
        "name": "DeferredToolPlaceholder",
        "description": "placeholder",
        "input_schema": {"type": "object"},
        "defer_loading": True,
    },
]
EXTRA = {
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "metadata": {"user_id": "u1"},
}
HEADERS = {
    "anthropic-beta": "context-management-2025-06-27,advanced-tool-use-2025-11-20",
    "anthropic-dangerous-direct-browser-access": "true",
    "x-claude-code-session-id": CLIENT_ID,
    "x-app": "cli",
}


def task(text: str = "List the files") -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "text", "text": text}]},
        {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /work"}]},
    ]


def send(key: str, messages: list[dict], *, session: str | None = None, **kwargs):
    kwargs.setdefault("system", SYSTEM)
    kwargs.setdefault("tools", TOOLS)
    kwargs.setdefault("extra_body", EXTRA)
    kwargs.setdefault("max_tokens", 4000)

    headers = {**HEADERS, "X-Contextsvc-Key": key}
    if session:
        headers["X-Contextsvc-Session"] = session

    async def call():
        client = anthropic.AsyncAnthropic(
            base_url="http://localhost/proxy/anthropic",
            api_key=UPSTREAM_KEY,
            default_headers=headers,
            http_client=asgi_http(),
            max_retries=0,
        )
        return await client.messages.create(model=MODEL, messages=messages, **kwargs)

    return async_to_sync(call)()


def echo(message) -> dict:
    return {
        "role": "assistant",
        "content": [b.model_dump(exclude_none=True) for b in message.content],
    }


def test_headers_and_unknown_fields_reach_upstream_and_the_client_id_names_the_session(
    upstreams, alice_key
):
    fake, _ = upstreams
    send(alice_key[1], task(), extra_body={**EXTRA, "some_future_field": {"x": 1}})
    request = fake.messages_requests()[-1]
    for name, value in HEADERS.items():
        assert request.headers[name] == value
    for name, value in {**EXTRA, "some_future_field": {"x": 1}}.items():
        assert request.body[name] == value
    session = Session.objects.get(external_id=f"cc_{CLIENT_ID}")
    roles = list(Message.objects.filter(session=session).values_list("role", flat=True))
    assert roles == ["user", "system", "assistant"]
    # claude-opus-4-8 takes system messages: it stays one, right after the user turn.
    assert [m["role"] for m in request.body["messages"]][:2] == ["user", "system"]


def test_the_clients_tool_search_is_left_alone(upstreams, alice_key):
    fake, _ = upstreams
    # A small window and large tools: our deferral would hold most of them back.
    ModelProfile.objects.create(
        provider="anthropic", model=MODEL, context_window=20_000, buffer_tokens=1_000
    )
    big = [{**t, "description": t["description"] + " details" * 600} for t in TOOLS]
    send(alice_key[1], task(), max_tokens=1000, tools=big)
    body = fake.messages_requests()[-1].body
    tools = {t["name"]: t for t in body["tools"]}
    assert {"Bash", "ToolSearch", "DeferredToolPlaceholder"} <= set(tools)
    assert tools["DeferredToolPlaceholder"]["defer_loading"] is True
    assert "tool_search" not in tools
    session = Session.objects.get(external_id=f"cc_{CLIENT_ID}")
    assert session.policy["proxy"]["client_tool_search"] is True


def test_at_most_four_cache_breakpoints_counting_the_clients(upstreams, alice_key):
    fake, _ = upstreams
    history = task()
    reply = send(
        alice_key[1], history, extra_body={**EXTRA, "cache_control": {"type": "ephemeral"}}
    )
    history += [echo(reply), {"role": "user", "content": "and now?"}]
    send(alice_key[1], history, extra_body={**EXTRA, "cache_control": {"type": "ephemeral"}})
    for request in fake.messages_requests():
        assert markers(request.body) <= 4
        assert request.body["cache_control"] == {"type": "ephemeral"}


def test_cap_breakpoints_removes_ours_from_the_front():
    body = {
        "cache_control": {"type": "ephemeral"},
        "tools": [{"name": "a", "cache_control": {}}],
        "system": [{"type": "text", "text": "s", "cache_control": {}}] * 1
        + [{"type": "text", "text": "t", "cache_control": {}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "u", "cache_control": {}}]}
        ],
    }
    capped = cap_breakpoints(body)
    assert markers(capped) == 4
    assert "cache_control" not in capped["tools"][0]
    assert "cache_control" in capped["messages"][0]["content"][0]


def test_cap_breakpoints_leaves_the_shared_history_blocks_as_they_were():
    """The build's history blocks are the render memo's (shared by later builds): a
    marker is removed from a copy, so the next build of the same messages keeps its own."""

    def build(messages: list[EngineMessage]) -> dict:
        parts = ContextParts(
            model=MODEL, max_output_tokens=100, messages=messages, cache=CachePlan(history=True)
        )
        return build_request("anthropic", parts)

    def fresh() -> list[EngineMessage]:
        mark = {"cache_control": {"type": "ephemeral"}}  # the client's own, as Claude Code's
        return [
            EngineMessage(role="user", content=[{"type": "text", "text": "hi", **mark}], seq=1),
            EngineMessage(
                role="assistant", content=[{"type": "text", "text": "ok", **mark}], seq=2
            ),
            EngineMessage(role="user", content=[{"type": "text", "text": "go on"}], seq=3),
        ]

    messages = fresh()
    assert markers(build(messages)) == 3
    capped = cap_breakpoints(build(messages), limit=0)
    assert markers(capped) == 0
    assert markers(build(messages)) == 3
    assert build(messages) == build(fresh())


def test_cap_breakpoints_leaves_the_remembered_history_turns_as_they_were():
    """With a session's history memo the turns before the newest are shared by later
    builds too (``engine.history_memo``): a marker is removed in a copy of its turn."""
    mark = {"cache_control": {"type": "ephemeral"}}  # the client's own, as Claude Code's
    messages = [
        EngineMessage(role="user", content=[{"type": "text", "text": f"u{i}", **mark}], seq=i)
        if i % 2
        else EngineMessage(role="assistant", content=f"a{i}", seq=i)
        for i in range(1, 12)
    ]
    memo = HistoryMemo()

    def build(memo: HistoryMemo | None) -> dict:
        parts = ContextParts(
            model=MODEL,
            max_output_tokens=100,
            messages=messages,
            cache=CachePlan(history=True),
            memo=memo,
        )
        return build_request("anthropic", parts)

    assert markers(cap_breakpoints(build(memo), limit=0)) == 0
    assert build(memo) == build(None)
    assert markers(build(memo)) == 6


def test_side_requests_go_to_linked_sessions_never_the_main_transcript(upstreams, alice_key):
    key = alice_key[1]
    history = task()
    reply = send(key, history)
    main = Session.objects.get(external_id=f"cc_{CLIENT_ID}")
    before = list(Message.objects.filter(session=main).values_list("seq", "role", "content"))
    # Title generation: another system prompt, another first message.
    send(
        key,
        [{"role": "user", "content": "Write a title for: List the files"}],
        system="Write a title.",
        tools=[],
    )
    # A one-token quota probe.
    send(key, [{"role": "user", "content": "quota"}], system=SYSTEM, max_tokens=1, tools=[])
    sides = Session.objects.filter(parent=main)
    assert sides.count() == 2
    assert all(s.external_id.startswith(f"cc_{CLIENT_ID}~") for s in sides)
    assert (
        list(Message.objects.filter(session=main).values_list("seq", "role", "content")) == before
    )
    # The main conversation goes on in the main session, no divergence.
    history += [echo(reply), {"role": "user", "content": "next"}]
    send(key, history)
    main.refresh_from_db()
    assert main.message_count == len(before) + 2
    assert not ClientCompaction.objects.filter(session=main).exists()


def test_the_client_compacting_itself_keeps_everything_and_shows_an_event(
    upstreams, alice_key, client, admin_user
):
    key = alice_key[1]
    fake, _ = upstreams
    history = task()
    for k in range(3):
        reply = send(key, history)
        history += [echo(reply), {"role": "user", "content": f"step {k} done"}]
    main = Session.objects.get(external_id=f"cc_{CLIENT_ID}")
    stored = main.message_count
    # Claude Code's compaction: the history becomes its summary and the next message.
    summary = "This session is being continued from a previous conversation. Summary: listed files."
    compacted = [
        {"role": "user", "content": [{"type": "text", "text": summary}]},
        {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /work"}]},
        {"role": "user", "content": "go on"},
    ]
    send(key, compacted)
    main.refresh_from_db()
    event = ClientCompaction.objects.get(session=main)
    assert event.at_message == 0
    assert main.window_start_seq == event.marker_seq + 1 > stored
    texts = list(
        Message.objects.filter(session=main).order_by("seq").values_list("content", flat=True)
    )
    assert "step 1 done" in texts[:stored] and summary in texts[stored:]
    sent = str(fake.messages_requests()[-1].body["messages"])
    assert summary in sent and "step 1 done" not in sent
    client.force_login(admin_user)
    page = client.get(reverse("dashboard:session_detail", args=[main.pk])).content.decode()
    assert "client compaction" in page and f"#{event.marker_seq + 1}" in page


def test_a_window_that_cannot_hold_one_call_is_a_400_naming_the_fix(upstreams, alice_key, alice):
    fake, _ = upstreams
    assert (
        alice.post(
            "sessions",
            {
                "id": "tiny",
                "model": MODEL,
                "context_window": 8_000,
                "buffer_tokens": 500,
                "max_output_tokens": 1_000,
            },
        ).status_code
        == 201
    )
    with pytest.raises(anthropic.BadRequestError) as caught:
        send(alice_key[1], task(), session="tiny", max_tokens=32_000)
    message = caught.value.body["error"]["message"]
    assert "8,000" in message and "32,000" in message
    assert "CLAUDE_CODE_MAX_OUTPUT_TOKENS" in message and "context_window" in message
    session = Session.objects.get(external_id="tiny")
    assert session.message_count == 0 and session.sections == []
    assert fake.messages_requests() == []
