"""docs/concepts/trimming.md#line-paging tool_output_cache reads: paging inside a very long line,
``limit: 0``.

Through ``GET /refs/{ref}`` and the built-in ``tool_output_cache``.
"""

from __future__ import annotations

import pytest

from tests.conftest import tool_turn

pytestmark = pytest.mark.django_db

LONG = "".join(f"{i:05d}," for i in range(20_000))  # one line of 120,000 characters


@pytest.fixture
def long_line(alice, make_session) -> tuple[str, str]:
    sid = make_session()["id"]
    body = alice.post(
        f"sessions/{sid}/messages",
        {"messages": tool_turn("c1", "head\n" + LONG + "\ntail\n")},
    ).json()
    return sid, body["messages"][-1]["output_ref"]


def test_spec000_1_8_api_pages_by_character_inside_one_line(alice, long_line):
    _, ref = long_line
    first = alice.get(f"refs/{ref}", offset=2, limit=1, max_line_length=1000).json()
    assert first["text"] == "     2\t" + LONG[:1000] + " […line cut]"
    assert first["continue_line"] == {"offset": 2, "char_offset": 1000}
    assert first["next_offset"] == 3  # plain paging still moves on by line
    assert "char_offset=1000" in first["message"]
    got = [LONG[:1000]]
    query = first["continue_line"]
    while query is not None:
        page = alice.get(f"refs/{ref}", limit=1, max_line_length=25_000, **query).json()
        assert page["char_offset"] == query["char_offset"]
        got.append(page["text"].split("\t", 1)[1].removesuffix(" […line cut]"))
        query = page["continue_line"]
    assert "".join(got) == LONG


def test_spec000_1_8_api_char_offset_then_the_following_lines(alice, long_line):
    _, ref = long_line
    body = alice.get(f"refs/{ref}", offset=2, char_offset=len(LONG) - 6, limit=2).json()
    assert body["text"] == "     2\t19999,\n     3\ttail"
    assert body["continue_line"] is None and body["has_more"] is False


def test_spec000_1_8_api_limit_zero_means_the_default(alice, make_session):
    sid = make_session()["id"]
    text = "".join(f"line {i}\n" for i in range(1, 301))
    ref = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", text)}).json()[
        "messages"
    ][-1]["output_ref"]
    response = alice.get(f"refs/{ref}", limit=0)
    assert response.status_code == 200
    assert response.json()["lines"] == 100 == alice.get(f"refs/{ref}").json()["lines"]


def test_spec000_1_8_builtin_tool_pages_inside_a_line(alice, long_line):
    sid, ref = long_line
    call = f"sessions/{sid}/tools/tool_output_cache/call"
    first = alice.post(call, {"ref_id": ref, "offset": 2, "limit": 1}).json()
    # Cut at the session's max_line_length (2000), as a read tool cuts lines.
    assert first["continue_line"] == {"offset": 2, "char_offset": 2000}
    second = alice.post(call, {"ref_id": ref, **first["continue_line"], "limit": 1}).json()
    assert second["text"] == "     2\t" + LONG[2000:4000] + " […line cut]"
    assert second["continue_line"] == {"offset": 2, "char_offset": 4000}


def test_spec000_1_8_builtin_tool_limit_zero_means_the_default(alice, make_session):
    sid = make_session()["id"]
    text = "".join(f"line {i}\n" for i in range(1, 301))
    ref = alice.post(f"sessions/{sid}/messages", {"messages": tool_turn("c1", text)}).json()[
        "messages"
    ][-1]["output_ref"]
    call = f"sessions/{sid}/tools/tool_output_cache/call"
    response = alice.post(call, {"ref_id": ref, "limit": 0})
    assert response.status_code == 200
    assert response.json()["lines"] == 200 == alice.post(call, {"ref_id": ref}).json()["lines"]
