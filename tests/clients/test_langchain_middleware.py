"""The real LangChain v1 ``create_agent`` with ContextsvcMiddleware and a scripted chat model.

The model records what it is sent: the service's managed context (history
the agent's state never held, the system prompt and tools as the service has
them), not the agent's own message list. What the agent did reaches the
service: messages, usage, and a large tool output through the output store.
"""

from __future__ import annotations

import asyncio
from typing import Any

from contextsvc_client import Client
from contextsvc_client.langchain import ContextsvcMiddleware
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from tests.clients.conftest import LIVE_DB
from tests.conftest import tool_turn

pytestmark = [LIVE_DB]

WINDOW = {"context_window": 32_000, "max_output_tokens": 2_000, "buffer_tokens": 0}
BIG = "\n".join(f"{i:06d} compiled module_{i}.py in 0.{i % 10}s" for i in range(3000))  # ~130 KB


class ScriptedChat(BaseChatModel):
    """Answers from a script and records every call's messages and tools."""

    replies: list[AIMessage] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    seen_tools: list[list[dict[str, Any]]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        self.seen_tools.append(list(kwargs.get("tools") or ()))
        return ChatResult(generations=[ChatGeneration(message=self.replies.pop(0))])


@tool
def build_log(target: str) -> str:
    """The build log of a target."""
    return BIG


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return "sunny"


def _usage(inp: int, out: int) -> dict[str, Any]:
    return {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}


def test_the_model_receives_the_managed_context(live_service):
    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("gpt-4o", provider="openai", **WINDOW)
        # Earlier work the agent's state knows nothing of (another process, a resume).
        session.append(
            [{"role": "user", "content": "Earlier: set up the repo."}, *tool_turn("call_0", "ok")]
        )
        session.append([{"role": "assistant", "content": "The repo is set up."}])

        model = ScriptedChat(
            replies=[
                AIMessage(
                    content="",
                    tool_calls=[{"id": "call_1", "name": "build_log", "args": {"target": "app"}}],
                    usage_metadata=_usage(700, 20),
                ),
                AIMessage(
                    content="The build compiled 3000 modules.", usage_metadata=_usage(900, 12)
                ),
            ]
        )
        agent = create_agent(
            model,
            tools=[build_log, weather],
            system_prompt="You are a build assistant.",
            middleware=[ContextsvcMiddleware(session)],
        )
        result = agent.invoke({"messages": [{"role": "user", "content": "Did the build pass?"}]})

        assert result["messages"][-1].content == "The build compiled 3000 modules."
        first, second = model.seen
        # The service's context: its system prompt, then history the state never had.
        assert isinstance(first[0], SystemMessage) and "build assistant" in first[0].content
        assert first[1].content == "Earlier: set up the repo."
        assert first[-1].content == "Did the build pass?"
        assert {t["function"]["name"] for t in model.seen_tools[0]} == {"build_log", "weather"}
        # The 130 KB output went to the output store; the model got the service's view of it.
        output = second[-1]
        assert isinstance(output, ToolMessage) and output.tool_call_id == "call_1"
        assert len(output.content) < len(BIG) // 2 and "out_" in output.content

        raw = session.context("raw")["messages"]
        assert [m["role"] for m in raw] == [
            "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"
        ]  # fmt: skip
        assert raw[6]["output_ref"]
        stored = session.read_ref(raw[6]["output_ref"], offset=3000, limit=1)
        assert stored["text"].rstrip().endswith("compiled module_2999.py in 0.9s")
        reports = session.budget()["usage_reports"]  # newest first
        assert [(r["input_tokens"], r["output_tokens"]) for r in reports] == [(900, 12), (700, 20)]
        # Each report covers what its call was sent: up to the user's message, then the output.
        assert [r["through_seq"] for r in reports] == [7, 5]


def test_a_second_invocation_posts_only_what_is_new(live_service):
    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("gpt-4o", provider="openai", **WINDOW)
        model = ScriptedChat(
            replies=[AIMessage(content="Hello."), AIMessage(content="Still here.")]
        )
        middleware = ContextsvcMiddleware(session)
        agent = create_agent(model, tools=[weather], middleware=[middleware])
        state = agent.invoke({"messages": [{"role": "user", "content": "hi"}]})
        state["messages"].append({"role": "user", "content": "still there?"})
        agent.invoke({"messages": state["messages"]})

        contents = [m["content"] for m in session.context("raw")["messages"]]
        assert contents == ["hi", "Hello.", "still there?", "Still here."]
        # Without a system prompt the service sends none; the second call saw the whole window.
        assert [m.content for m in model.seen[1]] == ["hi", "Hello.", "still there?"]


def test_the_async_agent_goes_through_the_same_hooks(live_service):
    with Client(live_service.url, live_service.key) as client:
        session = client.create_session("gpt-4o", provider="openai", **WINDOW)
        model = ScriptedChat(
            replies=[
                AIMessage(
                    content="",
                    tool_calls=[{"id": "call_w", "name": "weather", "args": {"city": "Oslo"}}],
                    usage_metadata=_usage(300, 9),
                ),
                AIMessage(content="Sunny in Oslo.", usage_metadata=_usage(340, 5)),
            ]
        )
        agent = create_agent(model, tools=[weather], middleware=[ContextsvcMiddleware(session)])
        result = asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "Oslo?"}]}))

        assert result["messages"][-1].content == "Sunny in Oslo."
        raw = session.context("raw")["messages"]
        assert [(m["role"], m["content"]) for m in raw] == [
            ("user", "Oslo?"),
            ("assistant", ""),
            ("tool", "sunny"),
            ("assistant", "Sunny in Oslo."),
        ]
        assert [m.content for m in model.seen[1]][-1] == "sunny"
        assert len(session.budget()["usage_reports"]) == 2
