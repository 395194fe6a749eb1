"""Prompt sections, cache breakpoints and their provider formats
(docs/concepts/caching.md#breakpoints).

Pure engine tests: ``contextsvc.engine.prompt`` (order, split, breakpoint plan,
PromptBuilder) and how ``contextsvc.engine.build`` renders a plan for the
anthropic / openai / raw formats.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.build import ContextParts, build_request
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import Message, PromptSection, ToolCall, ToolDef
from contextsvc.engine.prompt import (
    MAX_BREAKPOINTS,
    SECTION_KINDS,
    CachePlan,
    PlanInput,
    PromptBuilder,
    cacheable_run,
    order_sections,
    plain_concatenation,
    plan_breakpoints,
    split_sections,
)
from contextsvc.engine.wellformed import EMPTY_HISTORY_TEXT


def S(name: str, kind: str, cacheable: bool = True, content: str | None = None) -> PromptSection:
    text = f"<{name}>" if content is None else content
    return PromptSection(name=name, content=text, cacheable=cacheable, kind=kind)


# --- order ------------------------------------------------------------------------------------


def test_s002_4_sections_assembled_static_to_dynamic():
    posted = [
        S("st", "status", False),
        S("sk", "skill"),
        S("pad", "scratchpad", False),
        S("mem", "memory"),
        S("agent_md", "rules"),
        S("base", "base"),
    ]
    assert [s.kind for s in order_sections(posted)] == list(SECTION_KINDS)


def test_s002_4_order_is_stable_within_a_kind():
    posted = [S("rules-b", "rules"), S("base", "base"), S("rules-a", "rules")]
    assert [s.name for s in order_sections(posted)] == ["base", "rules-b", "rules-a"]


def test_s002_4_unknown_kind_is_rejected_naming_the_section():
    with pytest.raises(EngineValidationError) as err:
        order_sections([S("base", "base"), S("mystery", "secret")])
    assert "mystery" in err.value.message and "secret" in err.value.message
    assert err.value.field == "sections.1.kind"


def test_s002_4_status_sections_go_to_the_tail_and_empty_ones_are_dropped():
    system, tail = split_sections(
        order_sections(
            [
                S("st", "status", False),
                S("base", "base"),
                S("empty", "memory", content=""),
                S("pad", "scratchpad", False),
            ]
        )
    )
    assert [s.name for s in system] == ["base", "pad"]
    assert [s.name for s in tail] == ["st"]


def test_s002_4_cacheable_run_stops_at_the_first_dynamic_section():
    assert (
        cacheable_run([S("a", "base"), S("b", "rules"), S("c", "memory", False), S("d", "skill")])
        == 2
    )
    assert cacheable_run([S("a", "base", False), S("b", "rules")]) == 0


# --- breakpoint plan --------------------------------------------------------------------------


def plan(system, **kw):
    data = {"tool_tokens": 0, "system_tokens": [1000] * len(system), "min_cacheable": 1024, **kw}
    return plan_breakpoints(system, PlanInput(**data))


def test_s002_4_breakpoint_after_the_last_cacheable_section_and_on_history():
    system = [S("base", "base"), S("rules", "rules"), S("pad", "scratchpad", False)]
    p = plan(system, history_tokens=500, has_history=True, mark_tools=False)
    assert p.system == (1,)  # after rules, not after the changing scratchpad
    assert p.history is True and p.tools is False
    assert p.prefix_tokens == (2000, 3500)


def test_s002_4_breakpoints_after_sections_1_to_3_when_cacheable_skills_follow():
    # docs/concepts/caching.md#breakpoints: a breakpoint after sections 1–3; skills
    # change on activation, so base … memory keep their own entry.
    system = [S("base", "base"), S("rules", "rules"), S("mem", "memory"), S("skill", "skill")]
    p = plan(system, has_history=True, history_tokens=10, mark_tools=False)
    assert p.system == (2, 3)
    assert p.count == 3


def test_s002_4_no_breakpoint_on_a_prefix_shorter_than_the_minimum():
    system = [S("base", "base")]
    p = plan(system, system_tokens=[900], min_cacheable=1024, has_history=True, history_tokens=200)
    assert p.system == ()  # 900 < 1024
    assert p.history is True  # 900 + 200 >= 1024
    p = plan(system, system_tokens=[900], min_cacheable=4096, has_history=True, history_tokens=200)
    assert p.count == 0


def test_s002_4_tools_are_marked_only_when_their_prefix_is_long_enough():
    assert plan([], tool_tokens=2000, has_history=True).tools is True
    assert plan([], tool_tokens=500, has_history=True).tools is False
    assert plan([], tool_tokens=2000, has_history=True, mark_tools=False).tools is False


def test_s002_4_priority_when_slots_are_short_history_first():
    system = [S("base", "base"), S("mem", "memory"), S("skill", "skill")]
    p = plan(system, tool_tokens=5000, has_history=True, history_tokens=10, max_breakpoints=2)
    assert p.history is True and p.system == (2,) and p.tools is False


def test_s002_4_history_breakpoint_can_be_turned_off():
    p = plan(
        [S("base", "base")],
        system_tokens=[2000],
        has_history=True,
        history_tokens=5000,
        history_breakpoint=False,
    )
    assert p.history is False and p.system == (0,)


def test_s002_4_plan_checks_its_input():
    with pytest.raises(EngineValidationError):
        plan_breakpoints([S("a", "base")], PlanInput(system_tokens=[]))
    with pytest.raises(EngineValidationError):
        plan_breakpoints([], PlanInput(ttl="2h"))


sections_st = st.lists(
    st.builds(
        S,
        name=st.text(min_size=1, max_size=5),
        kind=st.sampled_from([k for k in SECTION_KINDS if k != "status"]),
        cacheable=st.booleans(),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(
    system=sections_st,
    tokens=st.lists(st.integers(0, 5000), min_size=8, max_size=8),
    tool_tokens=st.integers(0, 5000),
    history=st.integers(0, 5000),
    min_cacheable=st.sampled_from([1, 1024, 2048, 4096]),
    max_breakpoints=st.integers(0, 6),
)
def test_s002_4_never_more_than_4_and_never_below_the_minimum(
    system, tokens, tool_tokens, history, min_cacheable, max_breakpoints
):
    system = order_sections(system)
    p = plan_breakpoints(
        system,
        PlanInput(
            tool_tokens=tool_tokens,
            system_tokens=tokens[: len(system)],
            history_tokens=history,
            has_history=history > 0,
            min_cacheable=min_cacheable,
            max_breakpoints=max_breakpoints,
        ),
    )
    assert p.count <= min(MAX_BREAKPOINTS, max_breakpoints)
    assert all(t >= min_cacheable for t in p.prefix_tokens)
    run = cacheable_run(system)
    assert all(i < run for i in p.system)  # never after a non-cacheable section


# --- PromptBuilder (docs/concepts/caching.md#prompt-builder signature) ----------------------------


def test_s002_4_prompt_builder_returns_prompt_and_breakpoint_offsets():
    built = (
        PromptBuilder([S("pad", "scratchpad", False, "PAD"), S("base", "base", True, "BASE")])
        .add(S("rules", "rules", True, "RULES"))
        .build()
    )
    assert built.prompt == "BASE\n\nRULES\n\nPAD"
    assert built.breakpoints == (len("BASE\n\nRULES"),)
    assert [b[0] for b in built.blocks] == ["base", "rules", "pad"]


def test_s002_8_plain_concatenation_keeps_the_agents_order():
    text = plain_concatenation(
        [S("b", "rules", content="B"), S("a", "base", content="A")], ["note"]
    )
    assert text == "B\n\nA\n\nnote"


# --- provider formats -------------------------------------------------------------------------


TOOLS = [ToolDef(name="bash", description="run", input_schema={"type": "object"})]


def conversation() -> list[Message]:
    return [
        Message(role="user", content="fix it", seq=1, token_count=10),
        Message(
            role="assistant",
            content="",
            tool_calls=(ToolCall(id="c1", name="bash", arguments={"c": 1}),),
            seq=2,
            token_count=10,
        ),
        Message(role="tool", content="out", tool_call_id="c1", seq=3, token_count=10),
    ]


def parts(**kw) -> ContextParts:
    base = {
        "model": "m",
        "max_output_tokens": 100,
        "sections": order_sections(
            [
                S("base", "base", content="BASE"),
                S("rules", "rules", content="RULES"),
                S("pad", "scratchpad", False, "PAD"),
                S("status", "status", False, "STATUS 12%"),
            ]
        ),
        "messages": conversation(),
        "tools": TOOLS,
        "notes": ["[3 tools deferred to save context. Use tool_search to find them.]"],
        "cache": CachePlan(tools=True, system=(1,), history=True),
    }
    base.update(kw)
    return ContextParts(**base)


def markers(body: dict) -> int:
    return json.dumps(body).count('"cache_control"')


def test_s002_4_anthropic_marks_system_tools_and_newest_history_block():
    body = build_request("anthropic", parts())
    assert [b["text"] for b in body["system"]] == ["BASE", "RULES", "PAD"]
    assert "cache_control" not in body["system"][0]
    assert body["system"][1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["system"][2]  # the scratchpad changes: after the breakpoint
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    last = body["messages"][-1]
    assert last["role"] == "user"
    kinds = [b["type"] for b in last["content"]]
    assert kinds == ["tool_result", "text", "text"]
    assert last["content"][0]["cache_control"] == {"type": "ephemeral"}
    # the dynamic text sits after every breakpoint
    assert [b["text"] for b in last["content"][1:]] == [
        "STATUS 12%",
        "[3 tools deferred to save context. Use tool_search to find them.]",
    ]
    assert markers(body) == 3


def test_s002_4_anthropic_one_hour_ttl():
    body = build_request("anthropic", parts(cache=CachePlan(system=(0,), ttl="1h")))
    assert body["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_s002_4_anthropic_without_plan_has_no_markers():
    assert markers(build_request("anthropic", parts(cache=None))) == 0


def test_s002_4_anthropic_tail_goes_to_the_system_end_when_no_user_turn_is_last():
    msgs = [*conversation(), Message(role="assistant", content="done", seq=4, token_count=3)]
    body = build_request("anthropic", parts(messages=msgs))
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [b["text"] for b in body["system"]][-2:] == [
        "STATUS 12%",
        "[3 tools deferred to save context. Use tool_search to find them.]",
    ]


def test_s002_4_final_instruction_comes_after_the_tail():
    body = build_request("anthropic", parts(final_instruction="FINISH NOW"))
    assert body["messages"][-1]["content"][-1]["text"] == "FINISH NOW"


def test_s002_4_anthropic_refuses_a_plan_with_more_than_4_markers():
    with pytest.raises(ValueError):
        build_request(
            "anthropic", parts(cache=CachePlan(tools=True, system=(0, 1, 2), history=True))
        )


def test_s002_4_openai_keeps_the_order_without_markers():
    body = build_request("openai", parts())
    assert markers(body) == 0
    msgs = body["messages"]
    assert msgs[0] == {"role": "system", "content": "BASE\n\nRULES\n\nPAD"}
    assert [m["role"] for m in msgs[1:]] == ["user", "assistant", "tool", "system"]
    assert msgs[-1]["content"].startswith("STATUS 12%\n\n[3 tools deferred")


def test_s002_4_openai_tail_follows_the_synthetic_user_turn_without_history():
    # No history: the request still gets a user turn (engine.wellformed.with_user_turn),
    # and the changing tail stays after it, as after any history.
    body = build_request("openai", parts(messages=[]))
    assert [m["role"] for m in body["messages"]] == ["system", "user", "system"]
    assert body["messages"][1]["content"] == EMPTY_HISTORY_TEXT
    assert body["messages"][2]["content"] == (
        "STATUS 12%\n\n[3 tools deferred to save context. Use tool_search to find them.]"
    )


def test_s002_4_raw_reports_the_plan():
    body = build_request("raw", parts())
    assert body["cache_breakpoints"]["count"] == 3
    assert body["plain"] is False


def test_s002_8_plain_mode_is_one_concatenated_system_block():
    body = build_request("anthropic", parts(plain=True))
    assert markers(body) == 0
    assert len(body["system"]) == 1
    assert body["system"][0]["text"] == (
        "BASE\n\nRULES\n\nPAD\n\nSTATUS 12%\n\n"
        "[3 tools deferred to save context. Use tool_search to find them.]"
    )
    assert body["messages"][-1]["content"][-1]["type"] == "tool_result"


@settings(max_examples=100, deadline=None)
@given(
    plan=st.builds(
        CachePlan,
        tools=st.booleans(),
        system=st.lists(st.integers(0, 4), max_size=2, unique=True).map(tuple),
        history=st.booleans(),
    ),
    n_messages=st.integers(0, 3),
)
def test_s002_4_every_rendered_marker_is_in_the_plan(plan, n_messages):
    body = build_request("anthropic", parts(cache=plan, messages=conversation()[:n_messages]))
    expected = (
        int(plan.tools)
        + len([i for i in plan.system if i < 3])
        + int(plan.history and n_messages > 0)
    )
    assert markers(body) == expected <= MAX_BREAKPOINTS
