"""A built-in tool's result, pure: the ref it read, and its view cut to the session's limits."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from contextsvc.engine.builtin_results import builtin_result_view, ref_read, result_limit
from contextsvc.engine.output_views import ViewConfig


def test_the_ref_read_is_the_results_ref_id_for_read_and_grep_only():
    page = json.dumps({"ref_id": "out_1", "matches": []})
    assert ref_read("tool_output_cache_grep", page) == "out_1"
    assert ref_read("tool_output_cache", page) == "out_1"
    assert ref_read("tool_search", page) is None
    assert ref_read("tool_output_cache", '{"error": "No output out_1"}') is None
    assert ref_read("tool_output_cache", "not json") is None


def test_a_result_that_fits_is_whole_and_the_token_cap_lowers_the_limit():
    assert builtin_result_view("x" * 100, "tool_output_cache", "out_1", ViewConfig()).is_full
    assert result_limit(ViewConfig(max_message_bytes=50_000, view_tokens=1000)) == 4000
    off = ViewConfig(enabled=False, max_message_bytes=10)
    assert builtin_result_view("x" * 100, "tool_output_cache", None, off).is_full


def test_a_large_one_line_result_keeps_its_head_and_tail_around_the_notice():
    page = json.dumps({"ref_id": "out_1", "matches": ["m" * 50] * 400, "next_offset": 977})
    view = builtin_result_view(
        page, "tool_output_cache_grep", "out_1", ViewConfig(max_message_bytes=2000)
    )
    assert view.state == "cut" and len(view.text.encode()) <= 2000
    assert view.text.startswith(page[:1000]) and view.text.endswith('"next_offset": 977}')
    assert "It read ref=out_1" in view.text


@given(st.text(min_size=1, max_size=3000), st.integers(min_value=400, max_value=4000))
def test_a_cut_view_fits_and_is_made_of_the_results_own_ends(text, limit):
    view = builtin_result_view(
        text, "tool_output_cache", "out_1", ViewConfig(max_message_bytes=limit)
    )
    if view.is_full:
        assert len(text.encode()) <= limit
        return
    assert len(view.text.encode()) <= limit
    head, _, rest = view.text.partition("\n[… ")
    assert text.startswith(head)
    tail = rest.partition(" …]")[2].removeprefix("\n")
    assert text.endswith(tail)
