"""Tool-description deferral and tool_search ranking (docs/concepts/deferral.md#tool-search)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextsvc.engine.deferral import (
    DEFERRAL_NOTE,
    TOOL_SEARCH,
    TOOL_SEARCH_NAME,
    assemble,
    choose_deferred,
    deferral_limit,
    scaled,
)
from contextsvc.engine.errors import EngineValidationError
from contextsvc.engine.messages import ToolDef
from contextsvc.engine.tokens import estimate_tool_def, estimate_tool_schemas, get_tokenizer
from contextsvc.engine.tool_index import build_index, search, terms


def T(name: str, category: str = "mcp", description: str = "", **schema) -> ToolDef:
    return ToolDef(
        name=name,
        description=description or name,
        input_schema={"type": "object", **schema},
        category=category,
    )


def tokens_of(tools, each: int = 100) -> dict[str, int]:
    return {t.name: each for t in tools}


# --- choosing what to defer -------------------------------------------------------------------


def test_s002_5_nothing_deferred_while_descriptions_fit():
    tools = [T("a"), T("b")]
    assert choose_deferred(tools, tokens_of(tools), {}, limit_tokens=500, scale=2.0) == []
    assert choose_deferred(tools, tokens_of(tools), {}, limit_tokens=400, scale=2.0) == []


def test_s002_5_builtins_are_never_deferred():
    tools = [T("bash", "builtin"), T("read", "builtin"), T("m1")]
    deferred = choose_deferred(tools, tokens_of(tools), {}, limit_tokens=10, scale=1.0)
    assert deferred == ["m1"]  # still over the limit: built-ins stay anyway


def test_s002_5_mcp_tools_before_skill_tools():
    tools = [T("s1", "skill"), T("m1"), T("s2", "skill"), T("m2")]
    deferred = choose_deferred(
        tools, tokens_of(tools), {}, limit_tokens=150, scale=1.0, search_tool_tokens=10
    )
    # 410 → defer m2, m1 (every MCP tool first) → 210 → then skill s2 → 110 ≤ 150.
    assert deferred == ["m2", "m1", "s2"]


def test_s002_5_the_clients_own_tools_go_after_mcp_and_skill_tools():
    # Bash is the least recently used, yet the MCP tool goes first, then the skill tool.
    tools = [T("Bash", "client"), T("mcp__github__create_issue"), T("s1", "skill")]
    used = {"Bash": 1, "mcp__github__create_issue": 9, "s1": 9}
    deferred = choose_deferred(tools, tokens_of(tools), used, limit_tokens=250, scale=1.0)
    assert deferred == ["mcp__github__create_issue"]  # 300 → 200 and its listing line: fits
    deferred = choose_deferred(tools, tokens_of(tools), used, limit_tokens=10, scale=1.0)
    assert deferred == ["mcp__github__create_issue", "s1", "Bash"]


def test_s002_5_least_recently_used_first_within_a_category():
    tools = [T("m1"), T("m2"), T("m3")]
    used = {"m1": 50, "m2": 10, "m3": 30}
    deferred = choose_deferred(tools, tokens_of(tools), used, limit_tokens=150, scale=1.0)
    assert deferred == ["m2", "m3"]  # 300 → 200 → 100 (+0 for tool_search) fits 150


def test_s002_5_never_used_count_as_oldest_and_the_last_listed_goes_first():
    tools = [T("m1"), T("m2"), T("m3"), T("m4")]
    deferred = choose_deferred(
        tools, tokens_of(tools), {"m1": 3}, limit_tokens=220, scale=1.0, note_style="count"
    )
    assert deferred == ["m4", "m3"]


def test_s002_5_the_search_tool_counts_against_the_budget():
    tools = [T("m1"), T("m2"), T("m3")]
    # 300 > 250: defer one → 200 + 60 (tool_search) = 260 > 250 → defer another.
    deferred = choose_deferred(
        tools, tokens_of(tools), {}, limit_tokens=250, scale=1.0, search_tool_tokens=60
    )
    assert len(deferred) == 2


def test_s002_5_budget_uses_the_scaled_schema_estimate():
    tools = [T("m1"), T("m2")]
    # 200 unscaled × 2.09 = 418 > 400 → something is deferred.
    assert choose_deferred(tools, tokens_of(tools), {}, limit_tokens=400, scale=2.09)
    assert not choose_deferred(tools, tokens_of(tools), {}, limit_tokens=418, scale=2.09)


def test_s002_5_threshold_of_the_effective_window():
    assert deferral_limit(100_000, 0.10) == 10_000
    for bad in (0, 1.5, -0.1, True, "0.1"):
        with pytest.raises(EngineValidationError):
            deferral_limit(100_000, bad)


def test_s002_5_missing_token_count_is_an_error_not_a_guess():
    with pytest.raises(EngineValidationError):
        choose_deferred([T("m1")], {}, {}, limit_tokens=0)


# --- assembling what is sent ------------------------------------------------------------------


def test_s002_5_sent_list_order_note_and_tokens():
    tools = [T("bash", "builtin"), T("m1"), T("m2"), T("m3")]
    sel = assemble(
        tools,
        tokens_of(tools),
        ["m3", "m2"],
        ["m3"],
        scale=1.0,
        search_tool_tokens=40,
        note_style="count",
    )
    assert [t.name for t in sel.active] == ["bash", "m1", TOOL_SEARCH_NAME, "m3"]
    assert sel.deferred == ("m2",)
    assert sel.loaded == ("m3",)
    assert sel.note == "[1 tools deferred to save context. Use tool_search to find them.]"
    assert sel.note == DEFERRAL_NOTE.format(n=1)
    assert sel.tokens_all == 400 and sel.tokens_sent == 340 and sel.tokens_saved == 60


def test_s002_5_no_search_tool_and_no_note_without_deferral():
    tools = [T("m1")]
    sel = assemble(tools, tokens_of(tools), [], scale=1.0, search_tool_tokens=40)
    assert [t.name for t in sel.active] == ["m1"] and sel.note is None and sel.tokens_saved == 0


def test_s002_5_an_agent_registered_tool_search_is_not_duplicated():
    tools = [T(TOOL_SEARCH_NAME, "builtin"), T("m1"), T("m2")]
    sel = assemble(tools, tokens_of(tools), ["m2"], scale=1.0, search_tool_tokens=40)
    assert [t.name for t in sel.active] == [TOOL_SEARCH_NAME, "m1"]
    assert sel.search_tool_added is False


def test_s002_5_tokens_match_the_budget_estimate():
    tok = get_tokenizer(None)
    tools = [T(f"m{i}", description="lists things " * i) for i in range(1, 6)]
    counts = {t.name: estimate_tool_def(t, tok) for t in tools}
    sel = assemble(tools, counts, [], scale=2.09)
    assert (
        sel.tokens_all
        == estimate_tool_schemas(tools, tok, scale=2.09)
        == scaled(sum(counts.values()), 2.09)
    )


@settings(max_examples=150, deadline=None)
@given(
    spec=st.lists(
        st.tuples(st.sampled_from(["builtin", "mcp", "skill", "client"]), st.integers(1, 500)),
        min_size=1,
        max_size=25,
    ),
    used=st.lists(st.integers(0, 100), min_size=25, max_size=25),
    limit=st.integers(0, 5000),
    search_tokens=st.integers(0, 100),
)
def test_s002_5_deferral_properties(spec, used, limit, search_tokens):
    tools = [T(f"t{i}", cat) for i, (cat, _) in enumerate(spec)]
    counts = {f"t{i}": n for i, (_, n) in enumerate(spec)}
    last_used = {f"t{i}": used[i] for i in range(len(spec)) if used[i]}
    deferred = choose_deferred(
        tools, counts, last_used, limit_tokens=limit, scale=1.0, search_tool_tokens=search_tokens
    )
    by_name = {t.name: t for t in tools}
    assert all(by_name[n].category != "builtin" for n in deferred)
    cats = [by_name[n].category for n in deferred]
    # all MCP before any skill, all skill before any of the client's own
    assert cats == sorted(cats, key=["mcp", "skill", "client"].index)
    sel = assemble(tools, counts, deferred, scale=1.0, search_tool_tokens=search_tokens)
    deferrable = [t for t in tools if t.category != "builtin"]
    if deferred:
        # fits, or nothing deferrable is left
        assert sel.tokens_sent <= limit or len(deferred) == len(deferrable)
    else:
        assert sum(counts.values()) <= limit or not deferrable
    for cat in ("mcp", "skill", "client"):
        chosen = [n for n in deferred if by_name[n].category == cat]
        kept = [t.name for t in deferrable if t.category == cat and t.name not in deferred]
        if chosen and kept:  # nothing kept is older than something deferred
            assert max(last_used.get(n, 0) for n in chosen) <= min(
                last_used.get(n, 0) for n in kept
            )


# --- search -----------------------------------------------------------------------------------


CATALOG = [
    T(
        "mcp__github__create_issue",
        description="Create an issue in a GitHub repository.",
        properties={
            "title": {"type": "string", "description": "Issue title"},
            "labels": {"type": "array", "description": "Labels to apply"},
        },
    ),
    T("mcp__github__list_pull_requests", description="List pull requests of a repository."),
    T("mcp__xcode__xcodebuild_run", description="Run xcodebuild for a scheme and return the log."),
    T(
        "mcp__k8s__get_pods",
        description="List the pods of a Kubernetes namespace.",
        properties={"namespace": {"type": "string"}},
    ),
    T(
        "mcp__jira__create_ticket",
        description="Open a new Jira ticket; like an issue tracker entry.",
    ),
    T(
        "mcp__slack__post_message",
        description="Post a message to a Slack channel.",
        properties={"channel": {"type": "string", "enum": ["general", "builds"]}},
    ),
]


@pytest.fixture(scope="module")
def index():
    return build_index(CATALOG)


def names(hits):
    return [h.tool.name for h in hits]


def test_s002_5_terms_split_snake_and_camel_case_and_stem():
    assert terms("mcp__github__createIssue") == ["mcp", "github", "create", "issue"]
    assert terms("Builds building build") == ["build", "build", "build"]


def test_s002_5_search_ranks_name_matches_first(index):
    hits = search(index, "create github issue")
    assert names(hits)[0] == "mcp__github__create_issue"
    assert "mcp__jira__create_ticket" in names(hits)  # description mentions issue
    assert hits[0].score > hits[1].score


def test_s002_5_search_matches_parts_of_name_words(index):
    # the example query of docs/concepts/deferral.md#tool-search
    assert names(search(index, "xcode build"))[0] == "mcp__xcode__xcodebuild_run"


def test_s002_5_search_uses_schema_words(index):
    assert names(search(index, "namespace"))[0] == "mcp__k8s__get_pods"
    assert names(search(index, "builds channel"))[0] == "mcp__slack__post_message"


def test_s002_5_exact_name_and_select_syntax(index):
    assert names(search(index, "mcp__slack__post_message"))[0] == "mcp__slack__post_message"
    hits = search(index, "select:mcp__k8s__get_pods, nope ,mcp__github__create_issue")
    assert names(hits) == ["mcp__k8s__get_pods", "mcp__github__create_issue"]


def test_s002_5_search_limit_and_candidates(index):
    assert len(search(index, "list", limit=1)) == 1
    assert search(index, "create", limit=0) == []
    hits = search(index, "create issue", among={"mcp__jira__create_ticket"})
    assert names(hits) == ["mcp__jira__create_ticket"]
    assert search(index, "select:mcp__k8s__get_pods", among=set()) == []


def test_s002_5_search_without_a_match_returns_nothing(index):
    assert search(index, "zzzqqq") == []
    assert search(index, "the and of") == []


def test_s002_5_hit_carries_the_full_schema(index):
    hit = search(index, "create github issue")[0].to_dict()
    assert hit["input_schema"]["properties"]["title"]["type"] == "string"
    assert set(hit) == {"name", "description", "input_schema", "category", "score"}


def test_tool_search_definition_is_a_valid_builtin():
    assert TOOL_SEARCH.category == "builtin"
    assert TOOL_SEARCH.input_schema["required"] == ["query"]
