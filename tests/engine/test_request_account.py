"""engine.request_account: the differences between a client's request and what was sent."""

from __future__ import annotations

from contextsvc.engine import request_account as account
from contextsvc.engine.wellformed import LEADING_USER_TEXT, NO_RESULT_TEXT
from contextsvc.engine.window_stats import seq_ranges

MARK = {"type": "ephemeral"}


def test_fields_passed_replaced_dropped_added():
    client = {
        "model": "m",
        "max_tokens": 10,
        "tools": [1],
        "tool_choice": {"type": "auto"},
        "messages": [],
        "metadata": {"user_id": "u"},
    }
    sent = {
        "model": "m",
        "max_tokens": 12,
        "tools": [1],
        "messages": [],
        "metadata": {"user_id": "u"},
        "system": "s",
    }
    changes = account.field_changes(client, sent)
    assert changes == {
        "passed": ["model", "metadata"],
        "replaced": ["max_tokens", "tools", "messages"],
        "dropped": ["tool_choice"],
        "added": ["system"],
    }


def test_tools_not_sent_are_deferred_or_on_a_final_turn_removed():
    client, sent = ["Bash", "Read", "mcp__gh__issue"], ["Bash", "tool_search"]
    assert account.tool_changes(client, sent, final=False) == {
        "added": ["tool_search"],
        "deferred": ["Read", "mcp__gh__issue"],
        "removed": [],
    }
    assert account.tool_changes(client, sent, final=True)["removed"] == ["Read", "mcp__gh__issue"]
    assert account.tool_names(
        [
            {"name": "a"},
            {"type": "function", "function": {"name": "b"}},
            {"type": "web_search"},
            "junk",
        ]
    ) == ["a", "b", "web_search"]


def test_cache_marks_name_each_place_once():
    body = {
        "cache_control": MARK,
        "tools": [{"name": "a"}, {"name": "b", "cache_control": MARK}],
        "system": [{"type": "text", "text": "s", "cache_control": MARK}],
        "messages": [
            {"role": "user", "content": "plain"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "x", "cache_control": MARK},
                    {"type": "text", "text": "y", "cache_control": MARK},
                ],
            },
        ],
    }
    assert account.cache_marks(body) == ["top", "tools[1]", "system[0]", "messages[1]"]
    assert account.cache_marks({"messages": "not a list", "system": "text"}) == []


def test_synthetic_items_are_counted_in_every_dialect():
    anthropic = [
        {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": NO_RESULT_TEXT}],
        },
    ]
    chat = [{"role": "tool", "tool_call_id": "t", "content": NO_RESULT_TEXT}]
    responses = [{"type": "function_call_output", "call_id": "t", "output": NO_RESULT_TEXT}]
    assert account.synthetic(anthropic) == {"results": 1, "user_lines": 1}
    assert account.synthetic(chat) == {"results": 1, "user_lines": 0}
    assert account.synthetic(responses) == {"results": 1, "user_lines": 0}


def test_digest_ignores_key_order_but_not_content():
    assert account.digest({"a": 1, "b": [2]}) == account.digest({"b": [2], "a": 1})
    assert account.digest({"a": 1}) != account.digest({"a": 2})


def test_seq_ranges_join_runs_and_list_views_by_state():
    runs = [(1, 2, "full", 5), (3, 3, "trimmed", 1), (4, 4, "full", 1), (9, 9, "cleared", 1)]
    assert seq_ranges(runs) == {
        "ranges": [[1, 4], [9, 9]],
        "views": {"trimmed": [[3, 3]], "cleared": [[9, 9]]},
    }


def test_the_history_is_not_read_for_what_cannot_be_there():
    chat = [{"role": "tool", "tool_call_id": "t", "content": NO_RESULT_TEXT}]
    assert account.synthetic(chat, open_calls=False) == {"results": 0, "user_lines": 0}
    marked = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": MARK}]}]
    body = {"messages": marked * 3}
    assert account.cache_marks(body) == ["messages[0]", "messages[1]", "messages[2]"]
    assert account.cache_marks(body, first=2) == ["messages[2]"]
