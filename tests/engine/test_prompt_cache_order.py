"""docs/concepts/caching.md#cacheable-first prompt-cache order: cacheable first within a kind;
breakpoints only before change."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contextsvc.engine.messages import PromptSection
from contextsvc.engine.prompt import (
    SECTION_KINDS,
    PlanInput,
    PromptBuilder,
    order_sections,
    plan_breakpoints,
)


def S(name: str, kind: str, cacheable: bool = True, content: str | None = None) -> PromptSection:
    return PromptSection(name=name, content=content or f"<{name}>", cacheable=cacheable, kind=kind)


def test_s002_4_cacheable_sections_first_within_a_kind_whatever_the_post_order():
    posted = [
        S("rules-live", "rules", False),
        S("base", "base"),
        S("rules-a", "rules"),
        S("rules-b", "rules"),
    ]
    assert [s.name for s in order_sections(posted)] == ["base", "rules-a", "rules-b", "rules-live"]


def test_s002_4_agents_order_within_a_kind_when_cacheable_first_is_off():
    posted = [S("rules-live", "rules", False), S("base", "base"), S("rules-a", "rules")]
    ordered = order_sections(posted, cacheable_first=False)
    assert [s.name for s in ordered] == ["base", "rules-live", "rules-a"]


@given(st.lists(st.tuples(st.sampled_from(SECTION_KINDS), st.booleans()), min_size=0, max_size=12))
def test_s002_4_order_property_kind_then_cacheable_then_posted(specs):
    posted = [S(f"s{i}", kind, cacheable) for i, (kind, cacheable) in enumerate(specs)]
    ordered = order_sections(posted)
    keys = [(SECTION_KINDS.index(s.kind), not s.cacheable, int(s.name[1:])) for s in ordered]
    assert keys == sorted(keys)


def plan(system, **kw):
    data = {"tool_tokens": 0, "system_tokens": [2000] * len(system), "min_cacheable": 1024, **kw}
    return plan_breakpoints(system, PlanInput(**data))


def test_s002_4_no_breakpoint_on_an_all_cacheable_prompt_when_nothing_varies_after():
    system = [S("base", "base"), S("rules", "rules")]
    bare = plan(system, tool_tokens=3000)
    assert bare.count == 0 and bare.system == () and bare.tools is False


def test_s002_4_breakpoint_when_history_tail_or_a_dynamic_section_follows():
    system = [S("base", "base"), S("rules", "rules")]
    assert plan(system, has_history=True, history_breakpoint=False).system == (1,)
    assert plan(system, has_tail=True).system == (1,)
    assert plan(system, has_tail=True, tool_tokens=3000).tools is True
    dynamic = [*system, S("pad", "scratchpad", False)]
    assert plan(dynamic).system == (1,)


def test_s002_4_sections_1_to_3_marked_when_cacheable_skills_follow_even_with_nothing_after():
    # Skills come and go: base … memory keep their own entry.
    system = [S("base", "base"), S("mem", "memory"), S("skill", "skill")]
    assert plan(system).system == (1,)


def test_s002_4_prompt_builder_no_breakpoint_on_an_all_cacheable_prompt():
    built = PromptBuilder([S("base", "base", content="BASE"), S("r", "rules", content="R")]).build()
    assert built.prompt == "BASE\n\nR" and built.breakpoints == ()


def test_s002_4_prompt_builder_one_breakpoint_before_the_dynamic_part():
    built = PromptBuilder(
        [
            S("pad", "scratchpad", False, "PAD"),
            S("rules-live", "rules", False, "LIVE"),
            S("base", "base", True, "BASE"),
            S("rules", "rules", True, "RULES"),
        ]
    ).build()
    # Cacheable RULES moves before the non-cacheable LIVE of the same kind.
    assert built.prompt == "BASE\n\nRULES\n\nLIVE\n\nPAD"
    assert built.breakpoints == (len("BASE\n\nRULES"),)
