"""Tool-description deferral behind tool_search over the API
(docs/concepts/deferral.md#tool-search).

Sessions from ``make_session`` have an effective window of 32,000 − 4,096 −
2,048 = 25,856 tokens, so the default threshold (0.10) leaves 2,585 tokens
(scaled ×2.09) for tool descriptions.
"""

from __future__ import annotations

import pytest

from contextsvc.engine.deferral import DEFERRAL_NOTE
from prompting.models import PromptState
from sessions.models import Session

pytestmark = pytest.mark.django_db

SERVERS = ["github", "jira", "slack", "xcode", "kubernetes"]
VERBS = ["create", "list", "delete", "update"]


def mcp_tool(server: str, verb: str) -> dict:
    return {
        "name": f"mcp__{server}__{verb}_item",
        "description": f"{verb.capitalize()} an item in {server}. "
        + "It talks to the remote server. " * 20,
        "input_schema": {
            "type": "object",
            "properties": {"item_id": {"type": "string", "description": f"The {server} item"}},
        },
        "category": "mcp",
    }


BUILTINS = [
    {
        "name": "bash",
        "description": "Run a command",
        "category": "builtin",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
    {
        "name": "read_file",
        "description": "Read a file",
        "category": "builtin",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
]
SKILLS = [
    {
        "name": f"skill_{n}",
        "description": f"Skill {n}. " + "Follows the skill's recipe. " * 20,
        "category": "skill",
        "input_schema": {"type": "object"},
    }
    for n in ("pdf", "xlsx")
]
MCP = [mcp_tool(s, v) for s in SERVERS for v in VERBS]


def names(tools: list[dict]) -> list[str]:
    return [t["name"] for t in tools]


@pytest.fixture
def sid(alice, make_session):
    sid = make_session(id="defer")["id"]
    response = alice.put(f"sessions/{sid}/tools", BUILTINS + SKILLS + MCP)
    assert response.status_code == 200, response.content
    alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "Ship the release"}]}
    )
    return sid


def context(alice, sid: str, fmt: str = "anthropic") -> dict:
    response = alice.get(f"sessions/{sid}/context", format=fmt)
    assert response.status_code == 200, response.content
    return response.json()


def call(alice, sid: str, **arguments):
    return alice.post(f"sessions/{sid}/tools/tool_search/call", arguments)


def test_s002_5_descriptions_over_the_threshold_are_deferred(alice, sid):
    body = context(alice, sid)
    sent = names(body["tools"])
    deferral = body["budget"]["deferral"]
    assert deferral["active"] is True
    assert {"bash", "read_file", "tool_search"} <= set(sent)  # built-ins never deferred
    assert deferral["deferred_count"] == len(BUILTINS + SKILLS + MCP) - (len(sent) - 1)
    note = DEFERRAL_NOTE.format(n=deferral["deferred_count"])
    last = body["messages"][-1]["content"][-1]
    assert last["type"] == "text" and last["text"].startswith(note + "\n\n## Available Tools\n")
    # The budget counts what is sent, and shows what deferral saved.
    budget = body["budget"]
    assert (
        budget["components"]["tool_descriptions"]
        == deferral["tokens_sent"]
        <= deferral["limit_tokens"]
    )
    assert deferral["tokens_saved"] == deferral["tokens_all"] - deferral["tokens_sent"] > 0
    assert deferral["limit_tokens"] == int(25_856 * 0.10)
    assert (
        alice.get(f"sessions/{sid}/budget").json()["components"]["tool_descriptions"]
        == deferral["tokens_sent"]
    )


def test_s002_5_mcp_tools_are_deferred_before_skill_tools(alice, sid):
    by_name = {t["name"]: t for t in BUILTINS + SKILLS + MCP}
    deferred = context(alice, sid)["budget"]["deferral"]["deferred"]
    assert {by_name[n]["category"] for n in deferred} == {"mcp"}  # skills kept while MCP go
    # Never used, so the MCP tools listed last go first; the first listed stay.
    assert MCP[-1]["name"] in deferred and MCP[0]["name"] not in deferred
    alice.patch(f"sessions/{sid}", {"policy": {"tool_deferral_threshold": 0.03}})
    deferred = context(alice, sid)["budget"]["deferral"]["deferred"]
    categories = [by_name[n]["category"] for n in deferred]
    assert categories == ["mcp"] * len(MCP) + ["skill"] * (len(categories) - len(MCP))
    assert "skill" in categories


def test_s002_5_the_clients_own_tools_are_deferred_last(alice, make_session):
    own = {
        "name": "Grep",
        "description": "Search files. " + "Matches a pattern in every file. " * 20,
        "category": "client",
        "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}},
    }
    sid = make_session(id="defer-client")["id"]
    response = alice.put(f"sessions/{sid}/tools", [own, *BUILTINS, *SKILLS, *MCP])
    assert response.status_code == 200, response.content
    assert Session.objects.get(external_id=sid).tools[0]["category"] == "client"
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "Go"}]})
    alice.patch(f"sessions/{sid}", {"policy": {"tool_deferral_threshold": 0.001}})
    by_name = {t["name"]: t for t in [own, *BUILTINS, *SKILLS, *MCP]}
    deferred = context(alice, sid)["budget"]["deferral"]["deferred"]
    categories = [by_name[n]["category"] for n in deferred]
    assert categories == ["mcp"] * len(MCP) + ["skill"] * len(SKILLS) + ["client"]


def test_s002_5_no_deferral_below_the_threshold(alice, sid):
    alice.patch(f"sessions/{sid}", {"policy": {"tool_deferral_threshold": 1.0}})
    body = context(alice, sid)
    assert names(body["tools"]) == names(BUILTINS + SKILLS + MCP)
    assert body["budget"]["deferral"]["active"] is False
    assert "tools deferred" not in str(body["messages"])


def test_s002_5_openai_format_carries_tool_search_and_the_note(alice, sid):
    body = context(alice, sid, "openai")
    assert "tool_search" in [t["function"]["name"] for t in body["tools"]]
    assert body["messages"][-1]["role"] == "system"
    assert (
        body["messages"][-1]["content"].startswith("[")
        and "tool_search" in body["messages"][-1]["content"]
    )


def test_s002_5_tool_search_returns_ranked_matches_with_schemas(alice, sid):
    context(alice, sid)
    response = call(alice, sid, query="create xcode item", limit=3)
    assert response.status_code == 200, response.content
    result = response.json()
    assert result["matches"][0]["name"] == "mcp__xcode__create_item"
    assert result["matches"][0]["input_schema"]["properties"]["item_id"]["type"] == "string"
    scores = [m["score"] for m in result["matches"]]
    assert scores == sorted(scores, reverse=True) and len(scores) <= 3
    assert result["loaded"] == [m["name"] for m in result["matches"]]


def test_s002_5_found_tools_are_sent_for_the_rest_of_the_turn(alice, sid):
    context(alice, sid)
    call(alice, sid, query="select:mcp__jira__delete_item")
    # The model calls it; the agent posts the call and its result, and asks for the next context.
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "s1",
                            "name": "tool_search",
                            "arguments": {"query": "select:mcp__jira__delete_item"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "s1", "content": "found"},
            ]
        },
    )
    body = context(alice, sid)
    assert names(body["tools"])[-1] == "mcp__jira__delete_item"
    assert body["budget"]["deferral"]["loaded"] == ["mcp__jira__delete_item"]
    # A new user message ends the turn: the promotion is over.
    alice.post(
        f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "thanks, next"}]}
    )
    assert "mcp__jira__delete_item" not in names(context(alice, sid)["tools"])


def test_s002_5_lru_is_learned_from_posted_tool_calls(alice, sid):
    before = context(alice, sid)["budget"]["deferral"]["deferred"]
    target = before[0]  # the first to go: never used, listed last
    assert target == MCP[-1]["name"]
    call(alice, sid, query=f"select:{target}")
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "g1", "name": target, "arguments": {}}],
                },
                {"role": "tool", "tool_call_id": "g1", "content": "created #12"},
                {"role": "user", "content": "and now the next one"},
            ]
        },
    )
    # The next turn re-chooses: the tool just used is the most recent MCP tool, so it stays.
    body = context(alice, sid)
    assert target in names(body["tools"])
    assert target not in body["budget"]["deferral"]["deferred"]
    assert PromptState.objects.get(session__external_id=sid).tool_last_used[target] == 2  # its seq


def test_s002_5_selection_is_frozen_within_a_turn(alice, sid):
    first = names(context(alice, sid)["tools"])
    # A deferred tool called directly (the model saw it earlier) is sent for the
    # rest of the turn; nothing else in the list moves.
    deferred = context(alice, sid)["budget"]["deferral"]["deferred"]
    alice.post(
        f"sessions/{sid}/messages",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "d1", "name": deferred[0], "arguments": {}}],
                },
                {"role": "tool", "tool_call_id": "d1", "content": "ok"},
            ]
        },
    )
    second = names(context(alice, sid)["tools"])
    assert second == [*first, deferred[0]]


def test_s002_5_searches_loads_and_savings_are_recorded(alice, sid):
    saved = context(alice, sid)["budget"]["deferral"]["tokens_saved"]
    call(alice, sid, query="slack")
    call(alice, sid, query="select:mcp__slack__list_item")
    deferral = alice.get(f"sessions/{sid}/budget").json()["deferral"]
    assert deferral["search_count"] == 2
    assert deferral["searched"]["mcp__slack__list_item"] == 2
    assert deferral["loaded_total"]["mcp__slack__list_item"] == 1  # loaded once per turn
    assert [s["query"] for s in deferral["recent_searches"]] == [
        "slack",
        "select:mcp__slack__list_item",
    ]
    assert deferral["tokens_saved_total"] == saved
    context(alice, sid)
    assert alice.get(f"sessions/{sid}/budget").json()["deferral"]["tokens_saved_total"] > saved


def test_s002_5_the_budget_counts_loaded_tools_once_they_are_sent(alice, sid):
    sent = context(alice, sid)["budget"]["components"]["tool_descriptions"]
    call(alice, sid, query="select:mcp__kubernetes__update_item")
    body = context(alice, sid)
    assert body["budget"]["components"]["tool_descriptions"] > sent
    assert alice.get(f"sessions/{sid}/budget").json()["components"]["tool_descriptions"] > sent


def test_tool_search_without_deferral_finds_but_loads_nothing(alice, make_session):
    sid = make_session(id="small")["id"]
    alice.put(f"sessions/{sid}/tools", BUILTINS)
    result = call(alice, sid, query="read a file").json()
    assert result["matches"][0]["name"] == "read_file"
    assert result["loaded"] == [] and result["deferred_remaining"] == 0


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"query": ""},
        {"query": 3},
        {"query": "x", "limit": 0},
        {"query": "x", "limit": 21},
        {"query": "x", "limit": True},
        {"query": "x", "verbose": True},
        {"query": "x" * 1001},
    ],
)
def test_tool_search_bad_arguments_are_422(alice, sid, arguments):
    response = alice.post(f"sessions/{sid}/tools/tool_search/call", arguments)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


def test_tool_search_is_listed_with_the_builtin_tools(alice):
    listing = alice.get("tools").json()
    assert "tool_search" in [t["name"] for t in listing["anthropic"]]
    assert "tool_search" in [t["function"]["name"] for t in listing["openai"]]


def test_tool_search_on_a_strangers_session_is_404(bob, sid):
    assert bob.post(f"sessions/{sid}/tools/tool_search/call", {"query": "x"}).status_code == 404


def test_s002_5_hundreds_of_deferred_tools_do_not_make_the_session_final(alice, make_session):
    sid = make_session(id="many")["id"]
    many = [mcp_tool(f"srv{i}", v) for i in range(60) for v in VERBS]  # 240 tools, ~40k tokens
    assert alice.put(f"sessions/{sid}/tools", many).status_code == 200
    alice.post(f"sessions/{sid}/messages", {"messages": [{"role": "user", "content": "hi"}]})
    body = context(alice, sid)
    assert body["budget"]["guard"]["status"] == "ok"
    assert len(body["tools"]) < 20


def test_s002_8_deferral_failure_sends_every_tool(alice, sid, monkeypatch):
    from contextsvc.engine import deferral

    sent = context(alice, sid)["budget"]["components"]["tool_descriptions"]
    monkeypatch.setattr(
        deferral, "assemble", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("x"))
    )
    body = context(alice, sid)
    assert names(body["tools"]) == names(BUILTINS + SKILLS + MCP)
    assert "tools deferred" not in str(body["messages"])
    assert [d["component"] for d in body["budget"]["degraded"]] == ["deferral"]
    assert body["budget"]["components"]["tool_descriptions"] > sent  # all of them counted again


# --- bad input: PUT tools ------------------------------------------------------------------------


def test_invalid_json_schema_is_422_naming_the_tool_and_nothing_applied(alice, sid):
    bad = {
        **BUILTINS[0],
        "name": "broken",
        "input_schema": {"type": "object", "properties": {"x": {"type": "strin"}}},
    }
    response = alice.put(f"sessions/{sid}/tools", [BUILTINS[1], bad])
    assert response.status_code == 422
    error = response.json()["error"]
    assert "'broken'" in error["message"] and "$.properties.x.type" in error["message"]
    assert error["details"]["field"] == "tools.1.input_schema"
    assert len(Session.objects.get(external_id=sid).tools) == len(BUILTINS + SKILLS + MCP)


def test_too_many_tools_is_422(alice, sid, settings):
    settings.CONTEXTSVC_MAX_TOOLS = 5
    response = alice.put(f"sessions/{sid}/tools", MCP[:6])
    assert response.status_code == 422
    assert "At most 5 tools" in response.json()["error"]["message"]
    assert MCP[5]["name"] in response.json()["error"]["message"]
    assert len(Session.objects.get(external_id=sid).tools) == len(BUILTINS + SKILLS + MCP)


def test_duplicate_tool_names_are_422(alice, sid):
    response = alice.put(f"sessions/{sid}/tools", [MCP[0], MCP[1], MCP[0]])
    assert response.status_code == 422 and MCP[0]["name"] in response.json()["error"]["message"]


def test_unknown_tool_category_is_422_naming_the_tool(alice, sid):
    response = alice.put(f"sessions/{sid}/tools", [{**MCP[0], "category": "plugin"}])
    assert response.status_code == 422
    assert MCP[0]["name"] in response.json()["error"]["message"]


def test_tool_search_name_is_reserved_for_the_builtin(alice, sid):
    mine = {**MCP[0], "name": "tool_search"}
    assert alice.put(f"sessions/{sid}/tools", [mine]).status_code == 422
    builtin = {**mine, "category": "builtin"}
    assert alice.put(f"sessions/{sid}/tools", [builtin, *MCP]).status_code == 200
    assert names(context(alice, sid)["tools"]).count("tool_search") == 1


def test_s002_8_deferral_failure_while_setting_tools_counts_every_tool(
    alice, make_session, monkeypatch
):
    from contextsvc.engine import deferral

    sid = make_session(id="putfail")["id"]
    monkeypatch.setattr(deferral, "choose_deferred", lambda *a, **k: 1 / 0)
    response = alice.put(f"sessions/{sid}/tools", BUILTINS + MCP)
    assert response.status_code == 200
    full = response.json()["budget"]["components"]["tool_descriptions"]
    monkeypatch.undo()
    alice.put(f"sessions/{sid}/tools", BUILTINS + MCP)
    assert alice.get(f"sessions/{sid}/budget").json()["components"]["tool_descriptions"] < full


def test_s002_5_state_is_rebuilt_when_missing(alice, sid):
    expected = names(context(alice, sid)["tools"])
    PromptState.objects.filter(session__external_id=sid).delete()
    body = context(alice, sid)
    assert names(body["tools"]) == expected
    assert body["budget"]["degraded"] == []
