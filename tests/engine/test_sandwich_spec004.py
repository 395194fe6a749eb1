"""docs/concepts/compaction.md#compression-not-needed: "not enough to compress" as a clear error
when forced, the minimum middle, the structured summary sections of its prompt, and the
summary sent in the system role (Anthropic: the system prompt; OpenAI: a
system message) where the session compacts with the sandwich."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.errors import CompressionNotNeededError, EngineValidationError
from contextsvc.engine.messages import Message
from contextsvc.engine.recall import with_search_hint
from contextsvc.engine.strategies.base import (
    CompactionConfig,
    StrategyContext,
    TokenCounter,
    Window,
)
from contextsvc.engine.strategies.sandwich import SECTIONS_INSTRUCTION, SandwichStrategy, sandwich
from contextsvc.engine.summarize import SummaryRequest, SummaryResult
from contextsvc.engine.summary_placement import resolve_summary_role
from contextsvc.engine.tokens import get_tokenizer

COUNTER = TokenCounter(get_tokenizer())


def chat(n: int) -> list[Message]:
    msgs = [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i} " + "w " * 40)
        for i in range(n)
    ]
    for i, msg in enumerate(msgs, start=1):
        msg.seq = i
        msg.token_count = COUNTER.message(msg)
    return msgs


@dataclass
class Recorder:
    name: str = "recorder"
    requests: list[SummaryRequest] = field(default_factory=list)

    def complete(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(
            text="## Key facts and decisions\n- x", model="m", summarizer=self.name
        )


def strategy(**kw) -> SandwichStrategy:
    return SandwichStrategy(counter=COUNTER, **kw)


# --- not enough to compress ---------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 5, 10])
def test_spec004_compression_not_needed_forced_is_an_error(n):
    with pytest.raises(CompressionNotNeededError) as exc:
        strategy().build_context(
            chat(n), None, 1000, force=True, strict=True, summarizer=Recorder()
        )
    assert exc.value.code == "COMPRESSION_NOT_NEEDED"
    assert isinstance(exc.value, EngineValidationError)
    assert exc.value.details["messages"] == n and exc.value.details["preserve_top"] == 5


def test_spec004_compression_not_needed_build_context_returns_the_full_history():
    # The sandwich (docs/concepts/compaction.md#sandwich): building a context for a short
    # conversation sends it whole.
    result = strategy().build_context(chat(10), None, 1, force=True, summarizer=Recorder())
    assert not result.summary_used and len(result.messages) == 10


def test_spec004_compression_not_needed_sandwich_strict_raises_and_lenient_skips():
    window = Window(chat(8))
    recorder = Recorder()
    with pytest.raises(CompressionNotNeededError):
        sandwich(
            window, StrategyContext(counter=COUNTER, summarizer=recorder, force=True, strict=True)
        )
    out = sandwich(window, StrategyContext(counter=COUNTER, summarizer=recorder, force=True))
    assert not out.report.applied and recorder.requests == []


# --- minimum middle -----------------------------------------------------------------------------


def test_spec004_min_middle_default_is_one_message():
    assert CompactionConfig().sandwich_min_middle == 1
    result = strategy().build_context(chat(11), None, 1, force=True, summarizer=Recorder())
    assert result.summary_used and (result.top_end, result.bottom_start) == (5, 6)


@pytest.mark.parametrize("min_middle,compressed", [(2, True), (3, False)])
def test_spec004_min_middle_is_configurable(min_middle, compressed):
    s = strategy(min_middle=min_middle)
    msgs = chat(12)  # middle of 2
    assert s.too_short(msgs) is (not compressed)
    result = s.build_context(msgs, None, 1, force=True, summarizer=Recorder())
    assert result.summary_used is compressed
    if not compressed:
        with pytest.raises(CompressionNotNeededError) as exc:
            s.build_context(msgs, None, 1, force=True, strict=True, summarizer=Recorder())
        assert exc.value.details["middle"] == 2 and exc.value.details["min_middle"] == 3


def test_spec004_min_middle_comes_from_the_policy_and_is_validated():
    assert CompactionConfig.from_policy({"sandwich_min_middle": 4}).sandwich_min_middle == 4
    with pytest.raises(EngineValidationError):
        CompactionConfig(sandwich_min_middle=-1)


# --- structured summary sections ------------------------------------------------------------


def test_spec004_compression_prompt_asks_for_structured_sections():
    recorder = Recorder()
    window = Window(chat(20))
    cfg = CompactionConfig()
    out = sandwich(
        window, StrategyContext(counter=COUNTER, summarizer=recorder, config=cfg, force=True)
    )
    assert out.report.applied
    prompt = recorder.requests[0].prompt
    headings = [
        "## Key facts and decisions",
        "## Context needed to continue",
        "## User preferences and requirements",
        "## Commitments and action items",
    ]
    positions = [prompt.index(h) for h in headings]
    assert positions == sorted(positions)
    # The compression prompt (docs/concepts/compaction.md#compression-prompt) is kept, the
    # instruction comes before the conversation.
    assert prompt.startswith("Summarize this conversation excerpt concisely.")
    assert prompt.index(SECTIONS_INSTRUCTION) < prompt.index("Conversation:\n---")


def test_spec004_structured_sections_can_be_turned_off():
    recorder = Recorder()
    cfg = CompactionConfig(sandwich_sections=False)
    sandwich(
        Window(chat(20)),
        StrategyContext(counter=COUNTER, summarizer=recorder, config=cfg, force=True),
    )
    assert "## Key facts and decisions" not in recorder.requests[0].prompt


# --- the summary in the system role (CX-T7) ---------------------------------------------------


# Where a summary enters the context it ends with the search hint (engine.recall).
PLAN_B = with_search_hint("They agreed on plan B.")


def parts(role: str) -> ContextParts:
    from contextsvc.engine.messages import PromptSection

    return ContextParts(
        model="m",
        max_output_tokens=100,
        sections=[PromptSection(name="base", content="You are helpful.", cacheable=True)],
        retain="[Start of the conversation, kept verbatim]",
        summary="They agreed on plan B.",
        messages=chat(3),
        summary_role=role,
    )


def test_cx_t7_summary_as_system_role_anthropic_in_the_system_prompt():
    body = build_request("anthropic", parts("system"))
    texts = [b["text"] for b in body["system"]]
    assert texts[0] == "You are helpful."
    assert f"[Earlier conversation summary: {PLAN_B}]" in texts
    assert "plan B" not in str(body["messages"])


def test_cx_t7_summary_as_system_role_openai_system_message():
    body = build_request("openai", parts("system"))
    msgs = body["messages"]
    assert msgs[0] == {"role": "system", "content": "You are helpful."}
    assert msgs[1] == {
        "role": "system",
        "content": f"[Earlier conversation summary: {PLAN_B}]",
    }
    assert all("plan B" not in str(m["content"]) for m in msgs[2:])


def test_cx_t7_summary_as_system_role_responses_and_raw():
    body = build_request("responses", parts("system"))
    assert f"[Earlier conversation summary: {PLAN_B}]" in str(body.get("instructions")) + str(
        [i for i in body["input"] if i.get("role") in ("system", "developer")]
    )
    assert build_request("raw", parts("system"))["summary_role"] == "system"


def test_spec000_2_7_summary_as_user_message_stays_the_default_role():
    body = build_request("anthropic", parts("user"))
    assert all("plan B" not in b["text"] for b in body["system"])
    texts = [b["text"] for m in body["messages"] for b in m["content"]]
    assert f"[Summary of the earlier conversation]\n{PLAN_B}" in texts
    assert ContextParts(model="m", max_output_tokens=1).summary_role == "user"


@pytest.mark.parametrize(
    "policy,role",
    [
        (None, "user"),
        ({}, "user"),
        ({"strategy": "sandwich"}, "system"),
        ({"chain": ["sandwich"]}, "system"),
        ({"chain": ["tool_clearing", "summarize"]}, "user"),
        ({"strategy": "sandwich", "summary_role": "user"}, "user"),
        ({"summary_role": "system"}, "system"),
    ],
)
def test_spec004_summary_role_auto_follows_the_sandwich(policy, role):
    assert resolve_summary_role(policy) == role
