"""The real OpenAI Agents SDK running on ContextsvcSession (live service, fake Responses upstream).

The agent calls a function tool every turn; its model is the SDK's Responses
model pointed at fakes/responses_server.py, which refuses any input
above its window. With ``session.run_config()`` every model call sends the
service's managed context, so 100+ turns in a small window stay inside it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from agents.memory import Session as SdkSession
from contextsvc_client import AsyncClient, Client
from contextsvc_client.agents import ContextsvcSession, call_model_input_filter
from openai import AsyncOpenAI

from fakes.responses_server import FakeResponses, estimate_tokens
from fakes.streams import ScriptedReply, tool_call
from tests.clients.conftest import LIVE_DB

pytestmark = [LIVE_DB]
set_tracing_disabled(True)  # the SDK would send traces to OpenAI

WINDOW = 16_000  # the fake refuses inputs above it; the service's window is the same
TURNS = 110
LISTING = "\n".join(
    f"src/module_{i:03d}.py  {1200 + i} bytes  last changed by the build" for i in range(30)
)


@function_tool
def list_files(directory: str) -> str:
    """List the files of a directory."""
    return f"{directory}:\n{LISTING}"


def tool_loop(body: dict[str, Any]) -> ScriptedReply:
    """The scripted model: a user question gets a tool call, a tool output gets the answer."""
    last = body["input"][-1]
    if last.get("type") == "function_call_output":
        return ScriptedReply(text=f"There are 30 files (answer {len(body['input'])}).")
    return ScriptedReply(tool_calls=[tool_call("list_files", {"directory": "src"})])


@pytest.fixture
def fake_responses():
    with FakeResponses(api_key="sk-fake", responder=tool_loop, window=WINDOW) as fake:
        yield fake


def _agent(fake: FakeResponses) -> Agent:
    client = AsyncOpenAI(base_url=f"{fake.base_url}/v1", api_key="sk-fake", max_retries=0)
    return Agent(
        name="lister",
        instructions="You list files. Use the tool, then answer in one line.",
        tools=[list_files],
        model=OpenAIResponsesModel(model="gpt-5.1", openai_client=client),
    )


async def _new_session(client: AsyncClient, **policy: Any) -> ContextsvcSession:
    return await ContextsvcSession.create(
        client,
        "gpt-5.1",
        provider="openai",
        context_window=WINDOW,
        max_output_tokens=1_000,
        buffer_tokens=0,
        policy=policy or None,
    )


def test_contextsvc_session_is_the_sdks_session_protocol():
    session = ContextsvcSession("any", client=AsyncClient("http://127.0.0.1:9", "cx_x"))
    assert isinstance(session, SdkSession)
    assert callable(call_model_input_filter(session))


@pytest.mark.slow
def test_a_hundred_turns_in_a_small_window_stay_inside_it(live_service, fake_responses):
    agent = _agent(fake_responses)

    async def run() -> tuple[str, list[str]]:
        async with AsyncClient(live_service.url, live_service.key) as client:
            session = await _new_session(client)
            finals = []
            for turn in range(TURNS):
                result = await Runner.run(
                    agent,
                    f"Turn {turn}: how many files are in src?",
                    session=session,
                    run_config=session.run_config(),
                )
                finals.append(result.final_output)
            return session.session_id, finals

    sid, finals = asyncio.run(run())

    assert len(finals) == TURNS and all("30 files" in f for f in finals)
    requests = fake_responses.responses_requests()
    assert len(requests) == 2 * TURNS  # a tool call and an answer per turn, none refused
    sizes = [estimate_tokens(r.body) for r in requests]
    assert max(sizes) <= WINDOW
    # Without the managed context the SDK would have sent the whole history by now.
    history_tokens = sum(len(LISTING) for _ in range(TURNS)) // 4
    assert history_tokens > 2 * WINDOW
    with Client(live_service.url, live_service.key) as client:
        session = client.get_session(sid)
        budget = session.budget()
    # Everything was posted (user, call, output, answer per turn); compaction made room.
    assert session.data["message_count"] >= 4 * TURNS
    assert session.data["window_start_seq"] > 1
    assert budget["used"] <= budget["effective_window"]
    # Usage from the run reached /usage: one report per model call, as the fake counted it.
    reports = budget["usage_reports"]  # the newest 20, newest first
    assert [r["input_tokens"] for r in reports] == [
        estimate_tokens(r.body) for r in reversed(requests[-len(reports) :])
    ]


def test_every_model_call_of_a_run_sends_the_managed_context(live_service, fake_responses):
    agent = _agent(fake_responses)

    async def run() -> list[dict[str, Any]]:
        async with AsyncClient(live_service.url, live_service.key) as client:
            session = await _new_session(client)
            await Runner.run(
                agent, "how many files?", session=session, run_config=session.run_config()
            )
            return (await session.service.context("responses"))["input"]

    managed = asyncio.run(run())
    second = fake_responses.responses_requests()[1].body
    # The tool-loop call (the SDK's own list otherwise) is the service's context,
    # instructions included.
    assert [i.get("type") for i in second["input"]] == [i.get("type") for i in managed[:-1]]
    assert "You list files." in second["instructions"]
    assert second["input"][-1]["type"] == "function_call_output"


def test_pop_item_and_clear_session_behave_as_the_sdk_documents(live_service, fake_responses):
    agent = _agent(fake_responses)

    async def run() -> dict[str, Any]:
        async with AsyncClient(live_service.url, live_service.key) as client:
            session = await _new_session(client)
            assert await session.pop_item() is None  # empty: None
            await Runner.run(
                agent, "how many files?", session=session, run_config=session.run_config()
            )
            items = await session.get_items()
            out: dict[str, Any] = {"items": items, "last2": await session.get_items(limit=2)}
            out["popped"] = await session.pop_item()  # the answer
            out["after_one"] = await session.get_items()
            out["popped_output"] = await session.pop_item()  # the tool's output
            out["after_two"] = await session.get_items()
            await session.clear_session()
            out["cleared"] = await session.get_items()
            out["popped_empty"] = await session.pop_item()
            # The cleared session is still usable, with its settings.
            result = await Runner.run(
                agent, "again?", session=session, run_config=session.run_config()
            )
            out["final"] = result.final_output
            out["data"] = await session.service.refresh()
            return out

    out = asyncio.run(run())
    items = out["items"]
    assert [i.get("type", "message") for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert out["last2"] == items[-2:]
    assert out["popped"] == items[-1] and out["after_one"] == items[:-1]
    # A tool output goes with its call: the service never keeps a call unanswered.
    assert out["popped_output"] == items[-2] and out["after_two"] == items[:1]
    assert out["cleared"] == [] and out["popped_empty"] is None
    assert "30 files" in out["final"]
    assert out["data"]["context_window"] == WINDOW and out["data"]["message_count"] == 4


def test_run_compaction_compacts_when_forced(live_service, fake_responses):
    agent = _agent(fake_responses)

    async def run() -> tuple[int, int, int]:
        async with AsyncClient(live_service.url, live_service.key) as client:
            session = await _new_session(client, compaction={"retain_last_turns": 1})
            for question in ("first?", "second?", "third?"):
                await Runner.run(agent, question, session=session, run_config=session.run_config())
            before = len(await session.get_items())
            await session.run_compaction({"response_id": "resp_x", "force": False})
            unchanged = len(await session.get_items())
            await session.run_compaction({"force": True})
            return before, unchanged, len(await session.get_items())

    before, unchanged, after = asyncio.run(run())
    assert unchanged == before
    assert after < before
