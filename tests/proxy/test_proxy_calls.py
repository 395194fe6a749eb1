"""Each proxy call leaves a ContextCall (source proxy), completed by the usage the
proxy captured from the upstream's reply, with its cost in the model's prices."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from contextsvc.engine import caching
from fakes.streams import ScriptedReply
from sessions.models import ContextCall, Session, UsageReport
from tests.proxy.conftest import PROXY_DB, asgi_claude

pytestmark = PROXY_DB

MODEL = "claude-opus-4-5"


def test_a_proxy_call_is_recorded_and_completed_by_the_captured_usage(upstreams, alice_key):
    fake, _ = upstreams
    fake.script(ScriptedReply(text="first"), ScriptedReply(text="second"))

    async def calls():
        client = asgi_claude(alice_key[1], session="ses_calls")
        messages = [{"role": "user", "content": "hi"}]
        first = await client.messages.create(model=MODEL, max_tokens=256, messages=messages)
        messages += [
            {"role": "assistant", "content": first.content[0].text},
            {"role": "user", "content": "again"},
        ]
        await client.messages.create(model=MODEL, max_tokens=256, messages=messages)

    async_to_sync(calls)()
    session = Session.objects.get(external_id="ses_calls")
    records = list(ContextCall.objects.filter(session=session).order_by("id"))
    reports = list(UsageReport.objects.filter(session=session).order_by("id"))
    assert len(records) == len(reports) == 2
    assert [r.source for r in records] == ["proxy", "proxy"]
    assert [r.through_seq for r in records] == [1, 3]
    prices = caching.Prices.from_table(records[0].prices)
    assert prices is not None  # claude-opus-4-5 has a price row
    for record, report in zip(records, reports, strict=True):
        assert record.completed_at is not None
        assert record.reported_input == report.input_tokens
        assert record.cache_read == report.cache_read_tokens
        assert record.cache_write == report.cache_creation_tokens
        assert record.reported_output == report.output_tokens
        expected = caching.cost_usd(
            prices,
            input_tokens=report.input_tokens,
            cache_write_tokens=report.cache_creation_tokens,
            cache_read_tokens=report.cache_read_tokens,
            output_tokens=report.output_tokens,
        )
        assert record.cost_usd == pytest.approx(expected)
        assert record.latency_ms is not None and record.latency_ms >= 0


def test_a_streamed_call_is_recorded_before_its_reply_completes_it(upstreams, alice_key):
    """The build's record is written once the stream has started (not before the
    forward), and before the reply is stored: the usage still completes it."""
    fake, _ = upstreams
    fake.script(ScriptedReply(text="streamed"))

    async def call():
        client = asgi_claude(alice_key[1], session="ses_calls_stream")
        async with client.messages.stream(
            model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            return await stream.get_final_text()

    assert async_to_sync(call)() == "streamed"
    session = Session.objects.get(external_id="ses_calls_stream")
    (record,) = ContextCall.objects.filter(session=session)
    (report,) = UsageReport.objects.filter(session=session)
    assert record.source == "proxy" and record.through_seq == 1
    assert record.completed_at is not None
    assert record.reported_input == report.input_tokens


def test_a_proxied_clients_tools_are_stored_as_client_and_mcp_tools(upstreams, alice_key):
    """The agent's own Bash is a ``client`` tool, ``mcp__github__create_issue`` an MCP
    server's; only the service's tools are ``builtin``. The call's record lists them so."""
    fake, _ = upstreams
    fake.script(ScriptedReply(text="ok"))
    schema = {"type": "object", "properties": {"command": {"type": "string"}}}
    tools = [
        {"name": "Bash", "description": "Run a command", "input_schema": schema},
        {"name": "mcp__github__create_issue", "description": "Open an issue",
         "input_schema": schema},
    ]  # fmt: skip

    async def call():
        client = asgi_claude(alice_key[1], session="ses_tool_categories")
        messages = [{"role": "user", "content": "hi"}]
        await client.messages.create(model=MODEL, max_tokens=256, messages=messages, tools=tools)

    async_to_sync(call)()
    session = Session.objects.get(external_id="ses_tool_categories")
    categories = {t["name"]: t["category"] for t in session.tools}
    assert categories.pop("Bash") == "client"
    assert categories.pop("mcp__github__create_issue") == "mcp"
    assert categories and set(categories.values()) == {"builtin"}  # the proxy's own
    (record,) = ContextCall.objects.filter(session=session)
    sent = {t["name"]: t["server"] for t in record.breakdown["tools"]["sent"]}
    assert sent["Bash"] == "client"
    assert sent["mcp__github__create_issue"] == "mcp:github"
