"""The OpenAI Agents SDK's ``Runner`` with its Responses model, pointed at the proxy (in process)."""

from __future__ import annotations

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from asgiref.sync import async_to_sync

from fakes.streams import ScriptedReply, tool_call
from sessions.models import Message, Session
from tests.proxy import responses_fixtures
from tests.proxy.conftest import PROXY_DB, UPSTREAM_KEY
from tests.proxy.responses_fixtures import asgi_responses

pytestmark = PROXY_DB
fake_responses = responses_fixtures.fake_responses

# The SDK would send traces to OpenAI: never from the suite.
set_tracing_disabled(True)


@function_tool
def line_count(path: str) -> str:
    """How many lines a file has."""
    return f"{path}: 42 lines"


def _agent(client) -> Agent:
    return Agent(
        name="counter",
        instructions="You count lines. Use the tool.",
        tools=[line_count],
        model=OpenAIResponsesModel(model="gpt-5.1", openai_client=client),
    )


def test_runner_tool_loop_through_the_proxy(fake_responses, alice_key):
    fake_responses.script(
        ScriptedReply(tool_calls=[tool_call("line_count", {"path": "a.py"}, id="call_lc")]),
        ScriptedReply(text="a.py has 42 lines."),
    )
    client = asgi_responses(alice_key[1], session="ses_agents")

    result = async_to_sync(Runner.run)(_agent(client), "How long is a.py?")

    assert result.final_output == "a.py has 42 lines."
    session = Session.objects.get(external_id="ses_agents")
    messages = list(Message.objects.filter(session=session).order_by("seq"))
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert "42 lines" in messages[2].content
    sent = fake_responses.responses_requests()[-1]
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert "You count lines." in sent.body["instructions"]
    outputs = [i for i in sent.body["input"] if i.get("type") == "function_call_output"]
    assert outputs and outputs[0]["call_id"] == "call_lc"


def test_runner_streamed_through_the_proxy(fake_responses, alice_key):
    fake_responses.script(
        ScriptedReply(tool_calls=[tool_call("line_count", {"path": "b.py"})]),
        ScriptedReply(text="b.py has 42 lines."),
    )
    client = asgi_responses(alice_key[1], session="ses_agents_stream")

    async def run():
        streamed = Runner.run_streamed(_agent(client), "How long is b.py?")
        kinds = [event.type async for event in streamed.stream_events()]
        return streamed.final_output, kinds

    final, kinds = async_to_sync(run)()
    assert final == "b.py has 42 lines."
    assert "raw_response_event" in kinds
    stored = Message.objects.filter(session__external_id="ses_agents_stream", role="tool")
    assert stored.count() == 1
